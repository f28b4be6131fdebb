package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-outbox/ferry/cmd/ferry/app"
	"github.com/ferry-outbox/ferry/codec"
	"github.com/ferry-outbox/ferry/redact"
)

// codecServerCmd serves the codec to the Temporal UI, which otherwise shows
// encrypted payloads as ciphertext.
func codecServerCmd(g *globals) *cobra.Command {
	var (
		listen  string
		origins []string
	)
	cmd := &cobra.Command{
		Use:   "codec-server",
		Short: "Serve the payload codec to the Temporal UI, so it shows decrypted payloads",
		Long: `Serves POST /decode and /encode with the keys of --codec-key or --codec-key-file,
as the Temporal UI's "codec endpoint" expects. Set it in the UI (Settings,
Codec Server, e.g. http://127.0.0.1:8234) or in the UI server's codec.endpoint.
Anyone who reaches this server can decrypt: keep it on loopback or behind the
UI's own authentication.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := g.config()
			if err != nil {
				return err
			}
			cdc, err := cfg.Codec()
			if err != nil {
				return err
			}
			if cdc == nil {
				return errors.New("no codec key: set --codec-key (FERRY_CODEC_KEY) or --codec-key-file (FERRY_CODEC_KEY_FILE)")
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("codec server on %s: %w", listen, err)
			}
			srv := &http.Server{Handler: codec.Handler(cdc, origins), ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(g.stdout, "ferry: codec server on http://%s (key %s encrypts; UI origins %s). Ctrl-C stops.\n",
				ln.Addr(), cdc.KeyID(), strings.Join(origins, ", "))
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case err := <-errc:
				return fmt.Errorf("codec server: %w", err)
			case <-cmd.Context().Done():
			}
			// Detached: the command's context is already cancelled.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 5*time.Second)
			defer cancel()
			return srv.Shutdown(ctx)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8234", "host:port to serve on")
	cmd.Flags().StringSliceVar(&origins, "ui-origin", []string{"http://127.0.0.1:8233", "http://localhost:8233"},
		"origins of Temporal UI pages allowed to call the server (CORS); * allows any")
	return cmd
}

// redactLastError masks the sensitive values of the event's payload in its
// last error, which an activity or a reconciler may have written quoting
// it; without the payload (blanked by retention) only field fragments are
// masked.
func redactLastError(red *redact.Redactor, aggType, eventType string, payload *string, lastErr string) string {
	var p []byte
	if payload != nil {
		p = []byte(*payload)
	}
	return red.Text(aggType, eventType, p, lastErr)
}

// devCodec is `ferry dev`'s codec server for its embedded UI.
type devCodec struct {
	cdc      *codec.Codec
	ln       net.Listener
	srv      *http.Server
	endpoint string // "" without codec keys
}

func listenDevCodec(cfg app.Config, addr string) (*devCodec, error) {
	cdc, err := cfg.Codec()
	if err != nil || cdc == nil {
		return &devCodec{}, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("codec server for the UI on %s (--codec-address): %w", addr, err)
	}
	return &devCodec{cdc: cdc, ln: ln, endpoint: "http://" + ln.Addr().String()}, nil
}

// serve answers the UI at uiURL (its origin).
func (d *devCodec) serve(uiURL string) {
	if d.ln == nil {
		return
	}
	d.srv = &http.Server{Handler: codec.Handler(d.cdc, []string{uiURL}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = d.srv.Serve(d.ln) }()
}

func (d *devCodec) stop() {
	switch {
	case d.srv != nil:
		_ = d.srv.Close()
	case d.ln != nil:
		_ = d.ln.Close()
	}
}
