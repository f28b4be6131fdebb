package app

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/internal/telemetry"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/walrelay"
	"github.com/ferry-outbox/ferry/worker"
)

// The fx modules below need a Config in the graph; each fills its defaults
// and validates it for itself (fx.Decorate is scoped to the module), so a
// service can supply Config{} with only what it changes. A *slog.Logger is
// optional (default slog.Default()).
var (
	// PostgresModule provides a *pgxpool.Pool from Config.PostgresURL.
	PostgresModule = fx.Module("ferry.postgres",
		fx.Decorate(withDefaults),
		fx.Provide(NewPool),
	)
	// TemporalModule provides a client.Client from Config's Temporal
	// settings.
	TemporalModule = fx.Module("ferry.temporal",
		fx.Decorate(withDefaults),
		fx.Provide(newTemporalClient),
	)
	// PollerModule runs the poller (PostgreSQL → Temporal). Needs a
	// *pgxpool.Pool and a client.Client.
	PollerModule = fx.Module("ferry.poller",
		fx.Decorate(withDefaults),
		fx.Provide(fx.Private, pollerConfig),
		fx.Provide(poller.New),
		fx.Provide(fx.Private, walConfig),
		fx.Invoke(runRelay),
	)
	// WorkerModule runs the worker (Temporal → RabbitMQ) with its own
	// publisher from Config.AMQPURL. Needs a *pgxpool.Pool and a
	// client.Client.
	WorkerModule = fx.Module("ferry.worker",
		fx.Decorate(withDefaults),
		fx.Provide(fx.Private, NewPublisher),
		fx.Provide(fx.Private, workerConfig),
		worker.Module,
	)
)

// Params are the dependencies shared by the modules' constructors.
type Params struct {
	fx.In

	Lifecycle fx.Lifecycle
	Config    Config
	Logger    *slog.Logger `optional:"true"`
	// Tracer is TracingModule's provider; without it, the global one.
	Tracer trace.TracerProvider `optional:"true"`
}

func (p Params) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.Default()
	}
	return p.Logger
}

func withDefaults(c Config) (Config, error) { return c.WithDefaults() }

type workerDeps struct {
	fx.In

	Params
	Pool      *pgxpool.Pool
	Temporal  client.Client
	Publisher *broker.Publisher
	Metrics   *metrics.Metrics     `optional:"true"`
	Maint     *metrics.Maintenance `optional:"true"`
}

func workerConfig(d workerDeps) (worker.Config, error) {
	return workerConfigFull(d.Config, d.Pool, d.Temporal, d.Publisher, d.Metrics, d.Maint, d.tracerProvider())
}

// MetricsModule provides Ferry's counters (*metrics.Metrics,
// *metrics.Maintenance, and *metrics.Consumer for consumers in the same
// process) with the outbox collector, and a *metrics.Server (nil when off).
// They go to the service's prometheus.Registerer when its graph has one
// (its own /metrics then serves them), else to a registry of Ferry's own,
// served on Config.MetricsAddress when set. The Temporal SDK's client and
// worker metrics (temporal_*) go to the same registry, through the client
// TemporalModule dials (a client.Client of the service's own records what
// its own MetricsHandler says). Needs a *pgxpool.Pool.
var MetricsModule = fx.Module("ferry.metrics",
	fx.Decorate(withDefaults),
	fx.Provide(newMetrics),
)

type metricsDeps struct {
	fx.In

	Params
	Pool       *pgxpool.Pool
	Registerer prometheus.Registerer `optional:"true"`
}

type metricsOut struct {
	fx.Out

	Metrics     *metrics.Metrics
	Maintenance *metrics.Maintenance
	Consumer    *metrics.Consumer
	// Server serves Ferry's own registry on Config.MetricsAddress; nil
	// when that is empty or the service brought a Registerer.
	Server *metrics.Server
	// SDK records the Temporal SDK's metrics on the same registry, through
	// the client TemporalModule dials; none when nothing serves them.
	SDK sdkMetrics
}

// sdkMetrics carries the Temporal SDK's metrics handler from MetricsModule
// to TemporalModule: a type of Ferry's own, so that it never meets a
// client.MetricsHandler of the service's in the graph.
type sdkMetrics struct{ handler client.MetricsHandler }

func newMetrics(d metricsDeps) (metricsOut, error) {
	var out metricsOut
	var own *prometheus.Registry
	reg := d.Registerer
	switch {
	case reg == nil:
		own = metrics.NewRegistry()
		reg = own
	case d.Config.MetricsAddress != "":
		return out, fmt.Errorf("Config.MetricsAddress %q and a prometheus.Registerer in the graph: Ferry's metrics go to the Registerer, which your service serves; leave MetricsAddress empty", d.Config.MetricsAddress)
	}
	// A service's registry outlives this app: Ferry's collectors leave it
	// when the app stops (the outbox collector reads a pool that closes).
	t := &trackingRegisterer{Registerer: reg}
	var err error
	if out.Metrics, out.Maintenance, _, err = RegisterMetrics(t, d.Pool); err != nil {
		return out, err
	}
	if d.Config.Source == SourceWAL {
		if err := t.Register(walrelay.NewSlotCollector(d.Pool, d.Config.WALSlot)); err != nil {
			t.unregisterAll()
			return out, fmt.Errorf("register replication slot collector: %w", err)
		}
	}
	if out.Consumer, err = metrics.NewConsumer(t); err != nil {
		t.unregisterAll()
		if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return out, fmt.Errorf("consumer metrics are already registered on your prometheus.Registerer: with ferry.Metrics in the graph, take its *metrics.Consumer from the graph instead of calling metrics.NewConsumer: %w", err)
		}
		return out, err
	}
	// The SDK's client and worker metrics (temporal_*) go on the same
	// registry when something serves it. The provider stops after the
	// client closes (the client, built later, stops first).
	if own == nil || d.Config.MetricsAddress != "" {
		h, shutdown, err := telemetry.TemporalMetrics(t)
		if err != nil {
			t.unregisterAll()
			return out, err
		}
		out.SDK = sdkMetrics{h}
		d.Lifecycle.Append(fx.StopHook(shutdown))
	}
	d.Lifecycle.Append(fx.StopHook(t.unregisterAll))
	if own != nil && d.Config.MetricsAddress != "" {
		out.Server = metrics.NewServer(d.Config.MetricsAddress, own)
		d.Lifecycle.Append(fx.StartStopHook(out.Server.Start, out.Server.Stop))
	}
	return out, nil
}

// RegisterMetrics registers the relay's and maintenance counters and the
// outbox collector (backlog, oldest age, table size, read from pool at
// scrape time) on reg. unregister takes them off again (a failed call has
// registered nothing).
func RegisterMetrics(reg prometheus.Registerer, pool *pgxpool.Pool) (m *metrics.Metrics, mm *metrics.Maintenance, unregister func(), err error) {
	t := &trackingRegisterer{Registerer: reg}
	defer func() {
		if err != nil {
			t.unregisterAll()
		}
	}()
	if m, err = metrics.New(t); err != nil {
		return nil, nil, nil, err
	}
	if mm, err = metrics.NewMaintenance(t); err != nil {
		return nil, nil, nil, err
	}
	if err = t.Register(metrics.NewOutboxCollector(pool)); err != nil {
		return nil, nil, nil, fmt.Errorf("register outbox collector: %w", err)
	}
	return m, mm, t.unregisterAll, nil
}

// trackingRegisterer remembers what it registered, so it can take it off
// a registry that outlives Ferry.
type trackingRegisterer struct {
	prometheus.Registerer
	mu sync.Mutex
	cs []prometheus.Collector
}

func (t *trackingRegisterer) Register(c prometheus.Collector) error {
	if err := t.Registerer.Register(c); err != nil {
		return err
	}
	t.mu.Lock()
	t.cs = append(t.cs, c)
	t.mu.Unlock()
	return nil
}

func (t *trackingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t *trackingRegisterer) unregisterAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cs {
		t.Registerer.Unregister(c)
	}
	t.cs = nil
}

type pollerDeps struct {
	fx.In

	Params
	Pool     *pgxpool.Pool
	Temporal client.Client
	Metrics  *metrics.Metrics `optional:"true"`
}

type walDeps struct {
	fx.In

	Params
	Pool   *pgxpool.Pool
	Poller *poller.Poller
}

// runRelay runs the poller's loop for the app's lifetime or, with
// Config.Source wal, the log-tailing relay (package walrelay) in its place:
// events then come from a logical replication slot, and the poller only
// dispatches them and runs the catch-up claim pass.
func runRelay(lc fx.Lifecycle, cfg Config, p *poller.Poller, wc walrelay.Config) error {
	if cfg.Source != SourceWAL {
		lc.Append(fx.StartStopHook(p.Start, p.Stop))
		return nil
	}
	r, err := walrelay.New(wc)
	if err != nil {
		return err
	}
	lc.Append(fx.StartStopHook(r.Start, r.Stop))
	return nil
}

func walConfig(d walDeps) walrelay.Config {
	wc := d.Config.walConfig()
	wc.Pool, wc.Poller, wc.Logger = d.Pool, d.Poller, d.logger()
	return wc
}

func pollerConfig(d pollerDeps) poller.Config {
	pc := PollerConfig(d.Config, d.Pool, d.Temporal, d.logger())
	pc.Metrics = d.Metrics.Relay()
	pc.TracerProvider = d.tracerProvider()
	return pc
}
