package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-outbox/ferry/consumer"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/internal/failpoint"
)

// checkerQueueEnv names the checker consumer's queue in its environment.
const checkerQueueEnv = "FERRY_E2E_QUEUE"

// checkerConsumerMain is a child process (childEnv=consumer): a consumer of
// the test's exchange built the way a service would build one (package
// consumer over package inbox), whose handler's effect is one row in
// checker_effects, written in the inbox transaction. After every outcome it
// notes the delivery in checker_deliveries. It runs until SIGTERM or SIGKILL.
//
// Its failpoints (FERRY_FAILPOINTS) are consumer.before-commit (the effect is
// written, the transaction not committed) and consumer.after-commit (the
// transaction committed, the delivery not acknowledged).
func checkerConsumerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runCheckerConsumer(ctx, logger); err != nil {
		fmt.Fprintf(os.Stderr, "checker consumer: %v\n", err)
		return 1
	}
	return 0
}

func runCheckerConsumer(ctx context.Context, logger *slog.Logger) error {
	pool, err := pgxpool.New(ctx, os.Getenv("FERRY_POSTGRES_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	in, err := inbox.New(inbox.Config{Pool: pool, Consumer: "checker"})
	if err != nil {
		return err
	}
	pid := os.Getpid()
	c, err := consumer.New(consumer.Config{
		URL:      os.Getenv("FERRY_AMQP_URL"),
		Queue:    os.Getenv(checkerQueueEnv),
		Exchange: os.Getenv("FERRY_EXCHANGE"),
		Bindings: []string{"#"},
		Inbox:    in,
		Handler: func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
			_, err := tx.Exec(ctx, `INSERT INTO checker_effects (event_id, aggregate_id, version, pid) VALUES ($1, $2, $3, $4)`,
				ev.ID, ev.AggregateID, ev.AggregateVersion, pid)
			failpoint.Inject("consumer.before-commit")
			return err
		},
		OnResult: func(r consumer.Result) {
			// Outside the inbox transaction, which is over: a crash right
			// here loses this note, never the effect.
			_, _ = pool.Exec(context.Background(), `INSERT INTO checker_deliveries (event_id, outcome, deliveries, pid) VALUES ($1, $2, $3, $4)`,
				r.Event.ID, string(r.Outcome), r.Deliveries, pid)
			if r.Outcome == consumer.Applied {
				failpoint.Inject("consumer.after-commit")
			}
		},
		RetryBackoff:        20 * time.Millisecond,
		MaxRetryBackoff:     500 * time.Millisecond,
		GapRetryDelay:       200 * time.Millisecond,
		ReconnectBackoff:    50 * time.Millisecond,
		MaxReconnectBackoff: time.Second,
		ShutdownTimeout:     5 * time.Second,
		Logger:              logger,
	})
	if err != nil {
		return err
	}
	if err := c.Declare(ctx); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	c.Stop()
	return nil
}
