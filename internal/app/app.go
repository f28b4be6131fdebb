package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"go.uber.org/dig"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/codec"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

// Roles says which components a process runs.
type Roles struct {
	Poller bool
	Worker bool
}

// Options returns the fx options of a Ferry process with the given roles.
func Options(cfg Config, roles Roles, logger *slog.Logger) fx.Option {
	opts := []fx.Option{
		fx.Supply(cfg, logger),
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		TracingModule,
		PostgresModule,
		TemporalModule,
		MetricsModule,
		// Built even when nothing else asks for it, so /metrics serves.
		fx.Invoke(func(*metrics.Metrics) {}),
	}
	if roles.Worker {
		opts = append(opts, WorkerModule)
	}
	if roles.Poller {
		opts = append(opts, PollerModule)
	}
	return fx.Options(opts...)
}

// RootCause strips fx's and dig's wrapping from a start-up error, leaving
// the message a person can act on.
func RootCause(err error) error {
	return dig.RootCause(err)
}

// NewPool opens and pings the PostgreSQL pool; fx closes it on stop.
func NewPool(lc fx.Lifecycle, cfg Config) (*pgxpool.Pool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout)
	defer cancel()
	pool, err := OpenPool(ctx, cfg.PostgresURL)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(pool.Close))
	return pool, nil
}

// OpenPool opens a pool and checks that PostgreSQL answers, with an error
// that says what to do when it does not.
func OpenPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors can echo the URL; never print a password.
		return nil, fmt.Errorf("PostgreSQL URL %s is not valid (set --postgres-url or FERRY_POSTGRES_URL)", redactURL(url))
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s: %w", redactURL(url), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %s\n  Is it running? Set --postgres-url or FERRY_POSTGRES_URL to point elsewhere", redactURL(url), shortErr(err))
	}
	return pool, nil
}

// NewTemporalClient dials Temporal; fx closes the client on stop.
func NewTemporalClient(p Params) (client.Client, error) {
	cfg := p.Config
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout)
	defer cancel()
	interceptors, err := clientInterceptors(p.tracerProvider())
	if err != nil {
		return nil, err
	}
	c, err := dialTemporal(ctx, cfg, p.logger(), interceptors)
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StopHook(c.Close))
	return c, nil
}

// DialTemporal dials the Temporal frontend (with TLS, mTLS and an API key
// when configured, and the payload codec when keys are set) and checks that
// it answers. Workers built on the client share its codec.
func DialTemporal(ctx context.Context, cfg Config, logger *slog.Logger) (client.Client, error) {
	return dialTemporal(ctx, cfg, logger, nil)
}

// dialTemporal is DialTemporal with client interceptors (tracing), which
// workers built on the client share.
func dialTemporal(ctx context.Context, cfg Config, logger *slog.Logger, interceptors []interceptor.ClientInterceptor) (client.Client, error) {
	conn, creds, err := cfg.temporalConnection()
	if err != nil {
		return nil, err
	}
	opts := client.Options{
		HostPort:          cfg.TemporalAddress,
		Namespace:         cfg.Namespace,
		Logger:            sdklog.NewStructuredLogger(sdkLogger(logger)),
		ConnectionOptions: conn,
		Credentials:       creds,
		Interceptors:      interceptors,
	}
	cdc, err := cfg.Codec()
	if err != nil {
		return nil, err
	}
	if cdc != nil {
		codec.ClientOptions(cdc, &opts)
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Temporal at %s (namespace %q): %s\n  Is a Temporal server running there? `ferry dev` starts an embedded one; set --temporal-address or FERRY_TEMPORAL_ADDRESS to point elsewhere",
			cfg.TemporalAddress, cfg.Namespace, shortErr(err))
	}
	return c, nil
}

// NewPublisher creates the RabbitMQ publisher and checks that the broker
// answers; fx closes it on stop.
func NewPublisher(lc fx.Lifecycle, cfg Config) (*broker.Publisher, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout)
	defer cancel()
	pub, err := OpenPublisher(ctx, cfg)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(pub.Close))
	return pub, nil
}

// OpenPublisher creates the RabbitMQ publisher and checks that the broker
// answers, with an error that says what to do when it does not.
func OpenPublisher(ctx context.Context, cfg Config) (*broker.Publisher, error) {
	pub, err := broker.New(broker.Config{URL: cfg.AMQPURL, Exchange: cfg.Exchange, DialTimeout: cfg.ConnectTimeout,
		MaxMessageBytes: cfg.MaxMessageBytes})
	if err != nil {
		return nil, err
	}
	if err := pub.Connect(ctx); err != nil {
		_ = pub.Close()
		return nil, fmt.Errorf("cannot reach RabbitMQ at %s: %s\n  Is it running? Set --amqp-url or FERRY_AMQP_URL to point elsewhere", broker.Redact(cfg.AMQPURL), shortErr(err))
	}
	return pub, nil
}

// WorkerConfig is the worker's configuration over pool, Temporal and the
// publisher; its activities count into m and mm (either may be nil).
func WorkerConfig(cfg Config, pool *pgxpool.Pool, c client.Client, pub *broker.Publisher, m *metrics.Metrics, mm *metrics.Maintenance) (worker.Config, error) {
	return workerConfigFull(cfg, pool, c, pub, m, mm, nil)
}

// tp, when nil, is the global provider (activities' default).
func workerConfigFull(cfg Config, pool *pgxpool.Pool, c client.Client, pub *broker.Publisher, m *metrics.Metrics, mm *metrics.Maintenance, tp trace.TracerProvider) (worker.Config, error) {
	key, err := activities.RoutingKeyTemplate(cfg.RoutingKey)
	if err != nil {
		return worker.Config{}, err
	}
	effectRoutes, effectRegistrars, err := WorkerEffects(cfg.Effects, pool, m)
	if err != nil {
		return worker.Config{}, err
	}
	acts, err := activities.New(activities.Config{Pool: pool, Publisher: pub, RoutingKey: key, Effects: effectRoutes, Metrics: m,
		MaintenanceMetrics: mm, Temporal: c, TracerProvider: tp})
	if err != nil {
		return worker.Config{}, err
	}
	wc := worker.Config{Temporal: c, Activities: acts, TaskQueue: cfg.TaskQueue, Namespace: cfg.Namespace,
		Effects: effectRegistrars, WorkflowTaskPollers: cfg.WorkflowTaskPollers, Workflow: WorkflowSettings(cfg)}
	if !cfg.NoSchedules {
		wc.Schedules = &worker.Schedules{
			Retention: workflows.RetentionInput{RowAge: cfg.RowRetention, PayloadAge: cfg.PayloadRetention},
			Reconcile: workflows.ReconcileInput{DriftSample: cfg.DriftSample},
		}
	}
	return wc, nil
}

// WorkflowSettings are the aggregate workflow's settings, which the worker
// owns and hands to every run at its start.
func WorkflowSettings(cfg Config) workflows.Settings {
	return workflows.Settings{
		IdleTimeout:      cfg.IdleTimeout,
		PublishBatchSize: cfg.PublishBatchSize,
		MaxBlockedRefs:   cfg.MaxBlockedRefs,
		Policies:         cfg.Policies,
	}
}

// PollerConfig is the poller's configuration over pool and Temporal. Its
// signal window follows the idle timeout the workers give their runs.
func PollerConfig(cfg Config, pool *pgxpool.Pool, c client.Client, logger *slog.Logger) poller.Config {
	return poller.Config{
		Pool:         pool,
		Temporal:     c,
		TaskQueue:    cfg.TaskQueue,
		BatchSize:    cfg.BatchSize,
		Lease:        cfg.Lease,
		PollInterval: cfg.PollInterval,
		SignalWindow: cfg.IdleTimeout,
		StartMode:    cfg.StartMode,
		Logger:       logger,
	}
}

// sdkLogger keeps the Temporal SDK to warnings and errors: its info lines
// (every worker start, every poll) bury what Ferry says.
func sdkLogger(l *slog.Logger) *slog.Logger {
	return slog.New(minLevel{l.Handler(), slog.LevelWarn})
}

type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(a), h.min}
}
func (h minLevel) WithGroup(n string) slog.Handler { return minLevel{h.Handler.WithGroup(n), h.min} }

func redactURL(raw string) string { return broker.Redact(raw) }

// shortErr keeps the innermost, most specific part of a dial error.
func shortErr(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i > 0 && len(s)-i < 120 && strings.Contains(s, "dial") {
		s = s[i+2:]
	}
	return strings.Trim(s, `"`)
}
