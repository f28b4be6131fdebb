package ferry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/codec"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/internal/telemetry"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/upcast"
	"github.com/ferry-outbox/ferry/walrelay"
	"github.com/ferry-outbox/ferry/worker"
)

// fx modules for services that embed Ferry. Poller and Worker need a
// Config in the graph (fx.Supply(ferry.Config{…})), a *pgxpool.Pool and a
// client.Client; a *slog.Logger and a trace.TracerProvider are optional
// (default slog.Default() and the global provider).
//
//	fx.New(
//		fx.Supply(ferry.Config{AMQPURL: "amqps://…"}),
//		fx.Provide(newServicePool),   // or ferry.Postgres
//		ferry.Temporal,               // or a client.Client of your own
//		ferry.Poller, ferry.Worker,   // either or both
//	)
//
// Each module fills the Config's defaults and checks it (Config.WithDefaults,
// by value: nothing is read or dialled), so a service supplies only what
// it changes, and a bad value fails fx.New naming the field. A Config that
// is filled already (by ferry.Module around them, or by the service:
// fx.Supply(cfg) of a cfg WithDefaults returned) is not filled again.
var (
	// Poller relays committed outbox rows to one Temporal workflow per
	// aggregate: by claiming pending rows, or with Config.Source "wal" by
	// tailing PostgreSQL's write-ahead log (docs/log-tailing.md).
	Poller = fx.Module("ferry.poller",
		fx.Decorate(withDefaults),
		fx.Provide(fx.Private, newPollerConfig),
		fx.Provide(poller.New),
		fx.Invoke(runRelay),
	)
	// Worker hosts the aggregate workflow and the publish activity, with a
	// RabbitMQ publisher of its own (Config.AMQPURL, Config.Exchange).
	Worker = fx.Module("ferry.worker",
		fx.Decorate(withDefaults),
		fx.Provide(fx.Private, newModuleBroker),
		fx.Provide(fx.Private, newWorkerConfig),
		worker.Module,
	)
	// Postgres provides a *pgxpool.Pool from the PostgresConfig in the
	// graph (optional: without one, the local default), for a service
	// that has none yet. fx closes it on stop.
	Postgres = fx.Module("ferry.postgres", fx.Provide(newPool))
	// Temporal provides a client.Client from the TemporalConfig in the
	// graph (optional: without one, the local default), carrying Temporal's
	// OpenTelemetry interceptor. fx closes it on stop.
	Temporal = fx.Module("ferry.temporal", fx.Provide(newTemporalClient, newPayloadConverter))
	// Metrics provides Ferry's counters, which Poller and Worker count
	// into, and the outbox collector (backlog, oldest age, table size; see
	// docs/operating.md). With a prometheus.Registerer in the graph they go
	// there and your service's /metrics serves them; without one they count
	// into a registry nobody serves. With a Registerer and Temporal in the
	// graph, the Temporal SDK's client and worker metrics (temporal_*) go
	// to the same registry. Needs a *pgxpool.Pool.
	Metrics = fx.Module("ferry.metrics", fx.Provide(newMetrics))
)

// Module is everything for a service that brings only settings: Postgres,
// Temporal, Metrics, Poller and Worker, over one Config filled once (the
// modules inside take it as filled).
var Module = fx.Module("ferry", fx.Decorate(withDefaults), Postgres, Temporal, relayModules)

// relayModules are Module's modules that take the Config.
var relayModules = fx.Options(Metrics, Poller, Worker)

// withDefaults fills the Config in the graph: once, since WithDefaults
// hands a Config it filled back as it is (a module inside ferry.Module,
// and every module given a Config the service filled, finds it filled).
func withDefaults(c Config) (Config, error) { return c.WithDefaults() }

// shared are the dependencies every module's constructor takes (a named
// field of each one's fx.In struct: fx fills nested parameter structs).
type shared struct {
	fx.In

	Lifecycle fx.Lifecycle
	Logger    *slog.Logger         `optional:"true"`
	Tracer    trace.TracerProvider `optional:"true"`
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

func tracerProvider(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return otel.GetTracerProvider()
	}
	return tp
}

type poolDeps struct {
	fx.In

	Lifecycle fx.Lifecycle
	Config    PostgresConfig `optional:"true"`
}

func newPool(d poolDeps) (*pgxpool.Pool, error) {
	pool, err := d.Config.Open(context.Background())
	if err != nil {
		return nil, err
	}
	d.Lifecycle.Append(fx.StopHook(pool.Close))
	return pool, nil
}

type temporalDeps struct {
	fx.In

	Shared shared
	Config TemporalConfig `optional:"true"`
	// SDKMetrics is Metrics'; without it the client records none of the
	// Temporal SDK's metrics.
	SDKMetrics sdkMetrics `optional:"true"`
}

// newTemporalClient dials Temporal with the tracing interceptor, so that
// the poller's signal-with-start carries the ferry.dispatch span in its
// header and every worker built on the client traces workflow runs,
// signals and activities as its descendants.
func newTemporalClient(d temporalDeps) (client.Client, error) {
	i, err := telemetry.TemporalInterceptor(tracerProvider(d.Shared.Tracer))
	if err != nil {
		return nil, err
	}
	c, err := d.Config.dial(context.Background(), logger(d.Shared.Logger), d.SDKMetrics.handler, i)
	if err != nil {
		return nil, err
	}
	d.Shared.Lifecycle.Append(fx.StopHook(c.Close))
	return c, nil
}

// PayloadConverter is, in an fx graph, the data converter Temporal's
// client was dialled with (Deps.DataConverter): ferry.Temporal provides it
// from TemporalConfig's codec keys. A service with a client of its own and
// a payload codec supplies it (fx.Supply(ferry.PayloadConverter{…})), so
// that workflow destinations' envelopes are encoded as the client would.
type PayloadConverter struct {
	// DataConverter; nil: Temporal's default.
	DataConverter converter.DataConverter
}

type converterDeps struct {
	fx.In

	Config TemporalConfig `optional:"true"`
}

// newPayloadConverter is the converter newTemporalClient dials with.
func newPayloadConverter(d converterDeps) (PayloadConverter, error) {
	cdc, err := d.Config.Codec()
	if err != nil || cdc == nil {
		return PayloadConverter{}, err
	}
	return PayloadConverter{DataConverter: codec.DataConverter(cdc)}, nil
}

type pollerDeps struct {
	fx.In

	Shared   shared
	Config   Config
	Pool     *pgxpool.Pool
	Temporal client.Client
	Metrics  *metrics.Metrics `optional:"true"`
}

func newPollerConfig(d pollerDeps) (poller.Config, error) {
	tp, log := tracerProvider(d.Shared.Tracer), logger(d.Shared.Logger)
	lane, err := laneTarget(d.Config, tp, log)
	if err != nil {
		return poller.Config{}, err
	}
	if lane != nil {
		d.Shared.Lifecycle.Append(fx.StopHook(lane.Close))
	}
	pc, err := pollerConfig(d.Config, d.Pool, d.Temporal, asTarget(lane), log)
	if err != nil {
		return poller.Config{}, err
	}
	pc.Metrics = d.Metrics.Relay()
	pc.TracerProvider = tp
	return pc, nil
}

type relayDeps struct {
	fx.In

	Shared shared
	Config Config
	Pool   *pgxpool.Pool
	Poller *poller.Poller
}

// runRelay runs the poller's loop for the app's lifetime or, with
// Config.Source wal, the log-tailing relay (package walrelay) in its place:
// events then come from a logical replication slot, and the poller only
// dispatches them and runs the catch-up claim pass.
func runRelay(d relayDeps) error {
	if d.Config.Source != SourceWAL {
		d.Shared.Lifecycle.Append(fx.StartStopHook(d.Poller.Start, d.Poller.Stop))
		return nil
	}
	wc := walConfig(d.Config)
	wc.Pool, wc.Poller, wc.Logger = d.Pool, d.Poller, logger(d.Shared.Logger)
	r, err := walrelay.New(wc)
	if err != nil {
		return err
	}
	d.Shared.Lifecycle.Append(fx.StartStopHook(r.Start, r.Stop))
	return nil
}

type brokerDeps struct {
	fx.In

	Shared shared
	Config Config
}

// newModuleBroker creates the worker's RabbitMQ target and checks that the
// broker answers; fx closes it on stop. Without a broker (Config.NoBroker)
// there is none: nil.
func newModuleBroker(d brokerDeps) (*rabbitmq.Target, error) {
	t, err := newBrokerTarget(d.Config, tracerProvider(d.Shared.Tracer), logger(d.Shared.Logger))
	if err != nil || t == nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.Config.ConnectTimeout)
	defer cancel()
	if err := t.Connect(ctx); err != nil {
		_ = t.Close()
		return nil, fmt.Errorf("cannot reach RabbitMQ at %s: %s\n  Is it running? Set Config.AMQPURL to point elsewhere", broker.Redact(d.Config.AMQPURL), shortErr(err))
	}
	d.Shared.Lifecycle.Append(fx.StopHook(t.Close))
	return t, nil
}

type workerDeps struct {
	fx.In

	Shared   shared
	Config   Config
	Pool     *pgxpool.Pool
	Temporal client.Client
	Broker   *rabbitmq.Target
	// Upcast lifts payloads for workflow destinations (Deps.Upcast).
	Upcast *upcast.Registry `optional:"true"`
	// Converter encodes workflow destinations' envelopes
	// (Deps.DataConverter); ferry.Temporal provides it.
	Converter PayloadConverter     `optional:"true"`
	Metrics   *metrics.Metrics     `optional:"true"`
	Maint     *metrics.Maintenance `optional:"true"`
}

func newWorkerConfig(d workerDeps) (worker.Config, error) {
	return workerConfig(d.Config, workerParts{pool: d.Pool, temporal: d.Temporal, broker: d.Broker, up: d.Upcast,
		dc: d.Converter.DataConverter, m: d.Metrics, mm: d.Maint, tp: tracerProvider(d.Shared.Tracer)})
}

type metricsDeps struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Config     Config `optional:"true"`
	Pool       *pgxpool.Pool
	Registerer prometheus.Registerer `optional:"true"`
}

type metricsOut struct {
	fx.Out

	Metrics     *metrics.Metrics
	Maintenance *metrics.Maintenance
	Consumer    *metrics.Consumer
	// SDK records the Temporal SDK's metrics on the same registry, through
	// the client Temporal dials; none without a Registerer in the graph.
	SDK sdkMetrics
}

// sdkMetrics carries the Temporal SDK's metrics handler from Metrics to
// Temporal: a type of Ferry's own, so that it never meets a
// client.MetricsHandler of the service's in the graph.
type sdkMetrics struct{ handler client.MetricsHandler }

func newMetrics(d metricsDeps) (metricsOut, error) {
	var out metricsOut
	cfg, err := d.Config.WithDefaults()
	if err != nil {
		return out, err
	}
	reg := d.Registerer
	if reg == nil {
		reg = metrics.NewRegistry()
	}
	// A service's registry outlives this app: Ferry's collectors leave it
	// when the app stops (the outbox collector reads a pool that closes).
	t := &trackingRegisterer{Registerer: reg}
	if out.Metrics, out.Maintenance, _, err = registerMetrics(t, d.Pool); err != nil {
		return out, err
	}
	if cfg.Source == SourceWAL {
		if err := t.Register(walrelay.NewSlotCollector(d.Pool, cfg.WALSlot)); err != nil {
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
	// registry when there is one to serve them. The provider stops after
	// the client closes (the client, built later, stops first).
	if d.Registerer != nil {
		h, shutdown, err := telemetry.TemporalMetrics(t)
		if err != nil {
			t.unregisterAll()
			return out, err
		}
		out.SDK = sdkMetrics{h}
		d.Lifecycle.Append(fx.StopHook(shutdown))
	}
	d.Lifecycle.Append(fx.StopHook(t.unregisterAll))
	return out, nil
}

// registerMetrics registers the relay's and maintenance counters and the
// outbox collector (backlog, oldest age, table size, read from pool at
// scrape time) on reg. unregister takes them off again (a failed call has
// registered nothing).
func registerMetrics(reg prometheus.Registerer, pool *pgxpool.Pool) (m *metrics.Metrics, mm *metrics.Maintenance, unregister func(), err error) {
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
	mm.CountHandoffsIn(m.Relay())
	if err = t.Register(metrics.NewOutboxCollector(pool)); err != nil {
		return nil, nil, nil, fmt.Errorf("register outbox collector: %w", err)
	}
	if err = t.Register(metrics.NewLaneCollector(pool)); err != nil {
		return nil, nil, nil, fmt.Errorf("register lane collector: %w", err)
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
