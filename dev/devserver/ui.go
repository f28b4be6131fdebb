package devserver

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
)

func (s *Server) startUI() error {
	host, port, err := splitHostPort(s.cfg.UIAddress)
	if err != nil {
		return fmt.Errorf("devserver: UIAddress %q: %w", s.cfg.UIAddress, err)
	}
	if port == 0 {
		if port, err = freePort(host); err != nil {
			return err
		}
	} else if err := portFree(host, port); err != nil {
		return fmt.Errorf("devserver: UIAddress %s is taken: %w", s.cfg.UIAddress, err)
	}
	cfg := &uiconfig.Config{
		Host:                host,
		Port:                port,
		TemporalGRPCAddress: s.frontend,
		EnableUI:            true,
		DefaultNamespace:    s.cfg.Namespace,
		HideLogs:            true,
		DisableNewsFetch:    true, // no internet here, and none needed
		CORS:                uiconfig.CORS{CookieInsecure: true},
		Codec:               uiconfig.Codec{Endpoint: s.cfg.CodecEndpoint},
	}
	s.ui = uiserver.NewServer(uioptions.WithConfigProvider(cfg))
	s.uiURL = "http://" + net.JoinHostPort(host, strconv.Itoa(port))
	go func() { _ = s.ui.Start() }()
	// Wait until the UI answers so the printed URL works when a person clicks it.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.uiURL + "/healthz")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("devserver: UI on %s did not answer", s.uiURL)
}
