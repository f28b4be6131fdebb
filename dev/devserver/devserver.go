package devserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"

	uiserver "github.com/temporalio/ui-server/v2/server"
)

// Config configures an embedded Temporal server.
type Config struct {
	// DatabasePath is the SQLite file that keeps workflow state across restarts.
	// Its folder is created when missing. Empty means an in-memory database
	// that is gone when the server stops (what tests want). Unused with
	// Postgres.
	DatabasePath string
	// Postgres keeps the server's state in PostgreSQL databases instead of
	// SQLite: created when missing, their schemas set up or upgraded with
	// the server's own schema files at every start. Nil: SQLite.
	Postgres *Postgres
	// Services are the Temporal services this process runs, of "frontend",
	// "history", "matching" and "worker". Default: all four. A subset
	// makes the process one node of a cluster of processes that share
	// Postgres (required then) and find each other through its
	// cluster_membership table; a node without the frontend still needs
	// Address, the frontend it and its clients reach, and registers no
	// namespace.
	Services []string
	// Progress receives one line per step Start takes on the databases
	// (created, schema upgraded, up to date). Default: discarded.
	Progress io.Writer
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
	// when one is taken. With Postgres the membership ports must be below
	// 32768: the server keeps them in a SMALLINT column. Default: free
	// ports picked at start (below 32768 with Postgres); when another
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

// clusterName is the name of the server's one cluster.
const clusterName = "active"

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
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	services, err := validServices(cfg.Services)
	if err != nil {
		return nil, err
	}
	cfg.Services = services
	if cfg.Postgres != nil {
		pg, err := cfg.Postgres.withDefaults()
		if err != nil {
			return nil, err
		}
		cfg.Postgres = &pg
	} else if len(cfg.Services) < len(allServices) {
		return nil, fmt.Errorf("devserver: Services %v is a part of a cluster: that needs Postgres, which the other parts share", cfg.Services)
	}

	host, port, err := splitHostPort(cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("devserver: Address %q: %w", cfg.Address, err)
	}
	if !cfg.runs(primitives.FrontendService) && port == 0 {
		return nil, fmt.Errorf("devserver: Address %q: a node without the frontend needs the frontend's fixed address", cfg.Address)
	}
	if port != 0 && cfg.runs(primitives.FrontendService) {
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
	if cfg.Postgres != nil && len(cfg.InternalPorts) == 7 {
		for _, i := range []int{0, 2, 4, 6} { // the membership ports
			if p := cfg.InternalPorts[i]; p < 1 || p > 32767 {
				return nil, fmt.Errorf("devserver: InternalPorts[%d] is %d: with Postgres a membership port must be from 1 to 32767 (the server keeps it in a SMALLINT column)", i, p)
			}
		}
	}

	var st stores
	if cfg.Postgres != nil {
		st, err = openPostgresStores(ctx, *cfg.Postgres, cfg.Progress)
	} else {
		st, err = openStores(cfg.DatabasePath)
	}
	if err != nil {
		return nil, err
	}

	var logger log.Logger = log.NewNoopLogger()
	if cfg.LogFile != "" {
		// The server's zap logger is nil when it cannot open the file.
		if err := os.MkdirAll(filepath.Dir(cfg.LogFile), 0o755); err != nil {
			return nil, fmt.Errorf("devserver: create folder for LogFile %s: %w", cfg.LogFile, err)
		}
		logger = log.NewZapLogger(log.BuildZapLogger(log.Config{OutputFile: cfg.LogFile, Level: cfg.LogLevel}))
	}
	if st.forgetMembers != nil {
		// The members of the last run are dead; joining them would stall
		// the start. Best effort: without it the start is only slower.
		if n, err := st.forgetMembers(ctx); err != nil {
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
	if !cfg.runs(primitives.FrontendService) {
		return s, nil
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
			p, err := pickPort(host, st.postgres)
			if err != nil {
				return nil, err
			}
			ports = append(ports, p)
		}
	}
	if port == 0 {
		p, err := pickPort(host, st.postgres)
		if err != nil {
			return nil, err
		}
		port = p
	}
	srvCfg := serverConfig(host, port, ports, st)
	if cfg.runs(primitives.FrontendService) {
		// Written into the database before the server reads it (the
		// server's own helper for it; it speaks to any SQL plugin): the
		// namespace and its search attributes exist from the first request.
		ns, err := sqliteschema.NewNamespaceConfig(srvCfg.ClusterMetadata.CurrentClusterName, cfg.Namespace, false, cfg.SearchAttributes)
		if err != nil {
			return nil, fmt.Errorf("devserver: namespace %q: %w", cfg.Namespace, err)
		}
		if err := sqliteschema.CreateNamespaces(sqlCfg, ns); err != nil {
			return nil, fmt.Errorf("devserver: register namespace %q: %w", cfg.Namespace, err)
		}
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
			temporal.ForServices(cfg.Services),
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
	if !cfg.runs(primitives.FrontendService) {
		watch.started.Store(true)
		return s, nil
	}
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

// Services are the Temporal services this process runs.
func (s *Server) Services() []string { return s.cfg.Services }

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
