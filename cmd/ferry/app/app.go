package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.uber.org/dig"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/metrics"
)

// Options returns the fx options of a Ferry process with the given roles:
// the library's modules over the process's pool and client, its trace
// exporter, and its own Prometheus registry, served on MetricsAddress.
func Options(cfg Config, roles ferry.Roles, logger *slog.Logger) fx.Option {
	opts := []fx.Option{
		fx.Supply(cfg.Config, cfg.Postgres, cfg.Telemetry(), logger),
		// The key file is read when the client is built.
		fx.Provide(cfg.TemporalWithKeys),
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		TracingModule,
		ferry.Postgres,
		ferry.Temporal,
		fx.Provide(func(lc fx.Lifecycle) (prometheus.Registerer, *metrics.Server) {
			return newRegistry(lc, cfg.MetricsAddress)
		}),
		ferry.Metrics,
		// Built even when nothing else asks for it, so /metrics serves.
		fx.Invoke(func(*metrics.Metrics) {}),
	}
	if roles.Worker {
		opts = append(opts, ferry.Worker)
	}
	if roles.Poller {
		opts = append(opts, ferry.Poller)
	}
	return fx.Options(opts...)
}

// newRegistry is the process's registry, served on addr (nil server when
// addr is empty).
func newRegistry(lc fx.Lifecycle, addr string) (prometheus.Registerer, *metrics.Server) {
	reg := metrics.NewRegistry()
	if addr == "" {
		return reg, nil
	}
	srv := metrics.NewServer(addr, reg)
	lc.Append(fx.StartStopHook(srv.Start, srv.Stop))
	return reg, srv
}

// RootCause strips fx's and dig's wrapping from a start-up error, leaving
// the message a person can act on.
func RootCause(err error) error {
	return dig.RootCause(err)
}

// OpenPool opens the PostgreSQL pool and checks that PostgreSQL answers.
func (c Config) OpenPool(ctx context.Context) (*pgxpool.Pool, error) {
	return c.Postgres.Open(ctx)
}

// DialTemporal dials the Temporal frontend (with TLS, mTLS and an API key
// when configured, and the payload codec when keys are set, reading the key
// file now) and checks that it answers.
func (c Config) DialTemporal(ctx context.Context, logger *slog.Logger) (client.Client, error) {
	t, err := c.TemporalWithKeys()
	if err != nil {
		return nil, err
	}
	return t.Dial(ctx, logger)
}

// CheckBroker dials RabbitMQ and closes the connection again, with an
// error that says what to do when the broker does not answer.
func (c Config) CheckBroker(ctx context.Context) error {
	pub, err := broker.New(broker.Config{URL: c.AMQPURL, Exchange: c.Exchange, DialTimeout: c.ConnectTimeout,
		MaxMessageBytes: c.MaxMessageBytes})
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close() }()
	if err := pub.Connect(ctx); err != nil {
		return fmt.Errorf("cannot reach RabbitMQ at %s: %s\n  Is it running? Set Config.AMQPURL to point elsewhere", broker.Redact(c.AMQPURL), err)
	}
	return nil
}
