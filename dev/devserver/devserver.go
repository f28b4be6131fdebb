package devserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
)

// Config configures an embedded Temporal server.
type Config struct {
	// DatabasePath is the SQLite file that keeps workflow state across restarts.
	// Its folder is created when missing. Empty means an in-memory database
	// that is gone when the server stops (what tests want).
	DatabasePath string
	// Address is the frontend's gRPC host:port. Default "127.0.0.1:7233";
	// "127.0.0.1:0" picks a free port.
	Address string
	// UIAddress is where the Temporal Web UI listens, e.g. "127.0.0.1:8233".
	// Empty disables the UI.
	UIAddress string
	// Namespace is registered at start. Default "default".
	Namespace string
	// SearchAttributes are registered on Namespace at start.
	SearchAttributes map[string]enumspb.IndexedValueType
	// LogFile receives the server's own log (JSON lines, level LogLevel).
	// Empty discards it: the embedded server is chatty, logs expected errors
	// with stack traces while it starts and stops, and would drown what
	// Ferry prints.
	LogFile string
	// LogLevel of LogFile. Default "info".
	LogLevel string
	// CodecEndpoint is the payload codec server (`ferry codec-server`) the
	// UI asks to decode encrypted payloads; the browser calls it, so it
	// must allow the UI's origin. Default: none (the UI shows ciphertext).
	CodecEndpoint string
	// InternalPorts are the 7 ports of the server's internal services
	// (frontend membership; history, matching and worker gRPC and
	// membership), for a host whose firewall wants them fixed; Start fails
	// when one is taken. Default: free ports picked at start; when another
	// process takes one before the server binds it, Start picks new ones
	// (up to 5 tries).
	InternalPorts []int
	// MetricsAddress is where the server serves its own metrics in
	// Prometheus' text format (host:port, path /metrics; OpenTelemetry
	// names: counters end in _total, timers in _milliseconds): state
	// transitions (state_transition_count_ratio_count: one per persisted
	// mutable-state transaction), billed actions (action_total), persistence
	// and visibility requests and latency, task queue matching. Empty
	// serves none.
	MetricsAddress string
}

// Tries of a start whose picked ports were taken before the server bound
// them.
const startTries = 5

// Server is a running embedded Temporal server.
type Server struct {
	cfg      Config
	srv      temporal.Server
	ui       *uiserver.Server
	frontend string
	uiURL    string
	fatal    *fatalWatch
}

// Start builds and starts the server and waits until its frontend answers.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg.Address = cmp.Or(cfg.Address, "127.0.0.1:7233")
	cfg.Namespace = cmp.Or(cfg.Namespace, "default")
	cfg.LogLevel = cmp.Or(cfg.LogLevel, "info")

	host, port, err := splitHostPort(cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("devserver: Address %q: %w", cfg.Address, err)
	}
	if port != 0 {
		if err := portFree(host, port); err != nil {
			return nil, fmt.Errorf("devserver: Address %s is taken (is another Temporal server running?): %w", cfg.Address, err)
		}
	}
	if cfg.MetricsAddress != "" {
		mhost, mport, err := splitHostPort(cfg.MetricsAddress)
		if err != nil || mport == 0 {
			return nil, fmt.Errorf("devserver: MetricsAddress %q: want host:port with a fixed port", cfg.MetricsAddress)
		}
		if err := portFree(mhost, mport); err != nil {
			return nil, fmt.Errorf("devserver: MetricsAddress %s is taken: %w", cfg.MetricsAddress, err)
		}
	}
	if n := len(cfg.InternalPorts); n != 0 && n != 7 {
		return nil, fmt.Errorf("devserver: InternalPorts has %d ports: give all 7, or none", n)
	}

	st, err := openStores(cfg.DatabasePath)
	if err != nil {
		return nil, err
	}
	restart := st.restart

	var logger log.Logger = log.NewNoopLogger()
	if cfg.LogFile != "" {
		logger = log.NewZapLogger(log.BuildZapLogger(log.Config{OutputFile: cfg.LogFile, Level: cfg.LogLevel}))
	}
	if restart {
		// The members of the last run are dead; joining them would stall
		// the start. Best effort: without it the start is only slower.
		if n, err := forgetDeadMembers(ctx, cfg.DatabasePath); err != nil {
			logger.Warn("could not forget the cluster members of an earlier run; the start may wait for them (~50 s)", tag.Error(err))
		} else {
			logger.Info("forgot the cluster members of an earlier run", tag.Counter(n))
		}
	}
	var s *Server
	for try := 1; ; try++ {
		s, err = start(ctx, cfg, host, port, st, logger)
		// Fixed ports stay fixed: the error names the one that is taken.
		fixed := len(cfg.InternalPorts) > 0
		if err == nil || fixed || try == startTries || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		// Another process took a port between our picking and the
		// server's binding it: pick new ones.
		logger.Warn("a picked port was taken before the server bound it; trying again with new ports", tag.Error(err), tag.Attempt(int32(try)))
	}
	if err != nil {
		return nil, err
	}
	if err := s.addSearchAttributes(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	if cfg.UIAddress != "" {
		if err := s.startUI(); err != nil {
			_ = s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// start builds and starts one server on the frontend port (picked when 0)
// and the internal ports (picked when not configured), and waits until it
// answers. A fatal error the server reports on the way is returned.
func start(ctx context.Context, cfg Config, host string, port int, st stores, logger log.Logger) (*Server, error) {
	sqlCfg := st.main
	ports := cfg.InternalPorts
	if len(ports) == 0 {
		ports = make([]int, 0, 7)
		for range 7 {
			p, err := freePort(host)
			if err != nil {
				return nil, err
			}
			ports = append(ports, p)
		}
	}
	if port == 0 {
		p, err := freePort(host)
		if err != nil {
			return nil, err
		}
		port = p
	}
	srvCfg := serverConfig(host, port, ports, st)
	ns, err := sqliteschema.NewNamespaceConfig(srvCfg.ClusterMetadata.CurrentClusterName, cfg.Namespace, false, cfg.SearchAttributes)
	if err != nil {
		return nil, fmt.Errorf("devserver: namespace %q: %w", cfg.Namespace, err)
	}
	if err := sqliteschema.CreateNamespaces(sqlCfg, ns); err != nil {
		return nil, fmt.Errorf("devserver: register namespace %q: %w", cfg.Namespace, err)
	}
	watch := newFatalWatch()
	logger = &fatalLogger{inner: logger, watch: watch}
	authorizer, err := authorization.GetAuthorizerFromConfig(&srvCfg.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("devserver: authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&srvCfg.Global.Authorization, logger)
	if err != nil {
		return nil, fmt.Errorf("devserver: claim mapper: %w", err)
	}
	dc := dynamicConfig(st)

	// Built and started on a goroutine of its own, where a Fatal on the way
	// (a panic with the *FatalError, see fatalLogger) is recovered.
	type result struct {
		srv temporal.Server
		err error
	}
	built := make(chan temporal.Server, 1)
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				fe, ok := p.(*FatalError)
				if !ok {
					panic(p)
				}
				done <- result{err: fmt.Errorf("devserver: start server: %w", fe)}
			}
		}()
		opts := []temporal.ServerOption{
			temporal.WithConfig(srvCfg),
			temporal.ForServices(temporal.DefaultServices),
			temporal.WithLogger(logger),
			temporal.WithAuthorizer(authorizer),
			temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
			temporal.WithDynamicConfigClient(dc),
		}
		if cfg.MetricsAddress != "" {
			// Built here, not from the config: the server stops a handler
			// it was given (closing its listener, so a retry can bind the
			// address again), and a listen error is a Fatal this goroutine
			// recovers.
			mh, err := metrics.MetricsHandlerFromConfig(logger, &metrics.Config{Prometheus: &metrics.PrometheusConfig{
				Framework:     metrics.FrameworkOpentelemetry,
				ListenAddress: cfg.MetricsAddress,
			}})
			if err != nil {
				done <- result{err: fmt.Errorf("devserver: metrics on %s: %w", cfg.MetricsAddress, err)}
				return
			}
			opts = append(opts, temporal.WithCustomMetricsHandler(mh))
		}
		srv, err := temporal.NewServer(opts...)
		if err != nil {
			done <- result{err: fmt.Errorf("devserver: build server: %w", err)}
			return
		}
		built <- srv
		if err := srv.Start(); err != nil {
			done <- result{srv: srv, err: fmt.Errorf("devserver: start server: %w", err)}
			return
		}
		done <- result{srv: srv}
	}()
	var r result
	select {
	case r = <-done:
		if r.err != nil && r.srv == nil {
			abandon(built)
		}
	case <-watch.failed:
		abandon(built)
		return nil, fmt.Errorf("devserver: start server: %w", watch.err)
	case <-ctx.Done():
		abandon(built)
		return nil, fmt.Errorf("devserver: start server: %w", ctx.Err())
	}
	if r.err != nil {
		if r.srv != nil {
			stopWithin(r.srv, 10*time.Second)
		}
		return nil, r.err
	}
	s := &Server{cfg: cfg, srv: r.srv, frontend: net.JoinHostPort(host, strconv.Itoa(port)), fatal: watch}
	if err := s.waitReady(ctx); err != nil {
		stopWithin(r.srv, 10*time.Second)
		return nil, err
	}
	watch.started.Store(true)
	return s, nil
}

// abandon stops a server whose start failed half-way, if it was built, in
// the background: its goroutines may wait for one a Fatal ended.
func abandon(built <-chan temporal.Server) {
	select {
	case srv := <-built:
		go stopWithin(srv, 10*time.Second)
	default:
	}
}

// stopWithin stops srv, waiting at most d.
func stopWithin(srv temporal.Server, d time.Duration) {
	stopped := make(chan struct{})
	go func() { _ = srv.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(d):
	}
}

// FrontendAddress is the host:port clients dial.
func (s *Server) FrontendAddress() string { return s.frontend }

// Namespace is the pre-registered namespace.
func (s *Server) Namespace() string { return s.cfg.Namespace }

// UIURL is the Web UI's address, or "" when the UI is off.
func (s *Server) UIURL() string { return s.uiURL }

// Stop stops the UI and the server. It is safe to call more than once.
func (s *Server) Stop() error {
	if s == nil || s.srv == nil {
		return nil
	}
	if s.ui != nil {
		s.ui.Stop()
		s.ui = nil
	}
	srv := s.srv
	s.srv = nil
	return srv.Stop()
}

func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		c, err := client.DialContext(ctx, client.Options{HostPort: s.frontend, Namespace: s.cfg.Namespace, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
		if err == nil {
			_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
			c.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devserver: frontend %s not ready: %w", s.frontend, err)
		case <-s.fatal.failed:
			return fmt.Errorf("devserver: frontend %s not ready: %w", s.frontend, s.fatal.err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// addSearchAttributes registers the configured search attributes that the
// namespace lacks: a SQLite file made by an older version has the namespace
// already, so its pre-registration at creation did not run.
func (s *Server) addSearchAttributes(ctx context.Context) error {
	if len(s.cfg.SearchAttributes) == 0 {
		return nil
	}
	c, err := client.DialContext(ctx, client.Options{HostPort: s.frontend, Namespace: s.cfg.Namespace, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		return fmt.Errorf("devserver: dial %s: %w", s.frontend, err)
	}
	defer c.Close()
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: s.cfg.Namespace})
	if err != nil {
		return fmt.Errorf("devserver: list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range s.cfg.SearchAttributes {
		if _, ok := have.CustomAttributes[name]; !ok {
			missing[name] = typ
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: s.cfg.Namespace, SearchAttributes: missing,
	}); err != nil {
		return fmt.Errorf("devserver: register search attributes: %w", err)
	}
	return nil
}

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

func serverConfig(host string, port int, ports []int, st stores) *config.Config {
	svc := func(grpc, membership int) config.Service {
		return config.Service{RPC: config.RPC{GRPCPort: grpc, MembershipPort: membership, BindOnIP: host}}
	}
	frontendHostPort := net.JoinHostPort(host, strconv.Itoa(port))
	return &config.Config{
		Global: config.Global{
			Membership: config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: host},
		},
		Persistence: st.persistence(),
		ClusterMetadata: &cluster.Config{
			EnableGlobalNamespace:    false,
			FailoverVersionIncrement: 10,
			MasterClusterName:        "active",
			CurrentClusterName:       "active",
			ClusterInformation: map[string]cluster.ClusterInformation{
				"active": {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontendHostPort},
			},
		},
		DCRedirectionPolicy: config.DCRedirectionPolicy{Policy: "noop"},
		Services: map[string]config.Service{
			string(primitives.FrontendService): svc(port, ports[0]),
			string(primitives.HistoryService):  svc(ports[1], ports[2]),
			string(primitives.MatchingService): svc(ports[3], ports[4]),
			string(primitives.WorkerService):   svc(ports[5], ports[6]),
		},
		Archival: config.Archival{
			History:    config.HistoryArchival{State: "disabled"},
			Visibility: config.VisibilityArchival{State: "disabled"},
		},
		NamespaceDefaults: config.NamespaceDefaults{
			Archival: config.ArchivalNamespaceDefaults{
				History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
				Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
			},
		},
		PublicClient: config.PublicClient{HostPort: frontendHostPort},
	}
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return cmp.Or(host, "127.0.0.1"), port, nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("devserver: find a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(host string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}
