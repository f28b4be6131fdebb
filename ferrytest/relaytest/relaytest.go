package relaytest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/ferrytest"
)

// Config is what Start runs Ferry's relay over.
type Config struct {
	// DB is the test's schema (ferrytest.NewDB). Required.
	DB *ferrytest.DB
	// Temporal is a client of the test's Temporal server: Temporal's
	// development server, one the test binary embeds, or
	// ferrytest.UnreachableTemporal
	// for a publish-first relay that should need none. Required.
	Temporal client.Client
	// Broker is the test's exchange (ferrytest.NewBroker): the relay publishes to
	// it. Required unless Config.NoBroker.
	Broker *ferrytest.Broker
	// Config is the relay's settings (ferry.Config). AMQPURL and Exchange
	// are the Broker's; a zero TaskQueue is one of the test's own
	// (ferrytest.Name),
	// so that tests in parallel share no workflow; a zero PollInterval is
	// 100ms.
	Config ferry.Config
	// Roles are the components to run. Default: the poller and the worker.
	Roles ferry.Roles
	// Logger takes the relay's logs. Default: warnings and errors to the
	// test's output.
	Logger *slog.Logger
}

// Start builds Ferry's relay in the test's process (ferry.New) over
// the test's PostgreSQL schema, RabbitMQ exchange and Temporal client,
// starts it, and stops it at the test's cleanup. The worker, when it runs,
// needs Ferry's search attributes registered in the namespace, as in
// production (docs/operating.md). It fails the test when the relay does
// not start, with ferry's message.
func Start(tb testing.TB, cfg Config) *ferry.Relay {
	tb.Helper()
	switch {
	case cfg.DB == nil:
		tb.Fatalf("relaytest: Config.DB is nil: pass the test's ferrytest.NewDB")
	case cfg.Temporal == nil:
		tb.Fatalf("relaytest: Config.Temporal is nil: pass a client of the test's Temporal server, or ferrytest.UnreachableTemporal for a publish-first relay")
	case cfg.Broker == nil && !cfg.Config.NoBroker:
		tb.Fatalf("relaytest: Config.Broker is nil: pass the test's ferrytest.NewBroker (or set Config.NoBroker)")
	}
	c := cfg.Config
	if cfg.Broker != nil {
		c.AMQPURL, c.Exchange = cfg.Broker.URL, cfg.Broker.Exchange
	}
	if c.TaskQueue == "" {
		c.TaskQueue = ferrytest.Name("ferrytest")
	}
	if c.PollInterval == 0 {
		c.PollInterval = 100 * time.Millisecond
	}
	if !cfg.Roles.Poller && !cfg.Roles.Worker {
		cfg.Roles = ferry.Roles{Poller: true, Worker: true}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(output(tb), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	r, err := ferry.New(c, ferry.Deps{Pool: cfg.DB.Pool, Temporal: cfg.Temporal, Logger: cfg.Logger}, cfg.Roles)
	if err != nil {
		tb.Fatalf("relaytest: build the relay: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		tb.Fatalf("relaytest: start the relay: %v", err)
	}
	tb.Cleanup(r.Stop)
	return r
}

// output is the test's output, where the relay's warnings go; nothing
// after the test has ended (a log line then would panic).
func output(tb testing.TB) io.Writer {
	done := make(chan struct{})
	tb.Cleanup(func() { close(done) })
	return writerFunc(func(p []byte) (int, error) {
		select {
		case <-done:
			return len(p), nil
		default:
			return tb.Output().Write(p)
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
