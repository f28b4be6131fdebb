package ferry

import (
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/internal/app"
)

// Config is Ferry's one configuration: the same settings as the ferry
// command's flags, FERRY_* environment variables and config file (see
// README, Configuration). Zero fields take the defaults documented on each
// field; the modules and New fill them and validate.
type Config = app.Config

// EffectsConfig is Config.Effects: effect routes and the built-in payment
// and e-mail effects (README, Side effects).
type EffectsConfig = app.EffectsConfig

// Roles says which components New builds.
type Roles = app.Roles

// fx modules for services that embed Ferry. Each needs a Config in the graph
// (fx.Supply(ferry.Config{…})); a *slog.Logger is optional.
//
//	fx.New(
//		fx.Supply(ferry.Config{AMQPURL: "amqps://…"}),
//		fx.Provide(newServicePool),   // or ferry.Postgres
//		ferry.Temporal,               // or a client.Client of your own
//		ferry.Poller, ferry.Worker,   // either or both
//	)
var (
	// Poller relays committed outbox rows to one Temporal workflow per
	// aggregate: by claiming pending rows, or with Config.Source "wal" by
	// tailing PostgreSQL's write-ahead log (README, Polling or log
	// tailing). Needs a *pgxpool.Pool and a client.Client in the graph.
	Poller = app.PollerModule
	// Worker hosts the aggregate workflow and the publish activity, with a
	// RabbitMQ publisher of its own (Config.AMQPURL, Config.Exchange).
	// Needs a *pgxpool.Pool and a client.Client in the graph.
	Worker = app.WorkerModule
	// Postgres provides a *pgxpool.Pool from Config.PostgresURL, for a
	// service that has none in its graph yet.
	Postgres = app.PostgresModule
	// Temporal provides a client.Client from Config's Temporal settings
	// (address, namespace, TLS, API key), carrying Temporal's OpenTelemetry
	// interceptor.
	Temporal = app.TemporalModule
	// Tracing provides the trace.TracerProvider the other modules use:
	// Config.OTelExporter's OTLP exporter, flushed on stop, or (the default)
	// the global provider. Without it in the graph they use the global one.
	Tracing = app.TracingModule
	// Metrics provides Ferry's counters, which Poller and Worker count
	// into, and the outbox collector (backlog, oldest age, table size; see
	// README, Metrics). With a prometheus.Registerer in the graph they go
	// there and your service's /metrics serves them; without one, Ferry
	// serves its own registry on Config.MetricsAddress when set. With
	// Temporal in the graph, the Temporal SDK's client and worker metrics
	// (temporal_*) go to the same registry. Needs a *pgxpool.Pool.
	Metrics = app.MetricsModule
)

// Module is everything for a service that brings nothing but a Config:
// Tracing, Postgres, Temporal, Metrics, Poller and Worker.
var Module = fx.Options(Tracing, Postgres, Temporal, Metrics, Poller, Worker)
