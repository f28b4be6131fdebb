package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-outbox/ferry/internal/startstop"
)

// CleanerMetrics is what the cleaner counts (package metrics' *Consumer
// is the Prometheus one), by consumer (the inbox's name).
type CleanerMetrics interface {
	// InboxCleaned counts rows a round deleted.
	InboxCleaned(consumer string, rows int)
	// InboxCleanerStarted records the cleaner's start, which counts as its
	// last finished round until it finishes one.
	InboxCleanerStarted(consumer string)
	// InboxRoundDone records a round that finished without error (rows
	// deleted or not, or another process's cleaner held it).
	InboxRoundDone(consumer string)
}

type noCleanerMetrics struct{}

func (noCleanerMetrics) InboxCleaned(string, int)   {}
func (noCleanerMetrics) InboxCleanerStarted(string) {}
func (noCleanerMetrics) InboxRoundDone(string)      {}

// CleanerConfig configures a Cleaner.
type CleanerConfig struct {
	// Pool reaches the inbox tables. Required.
	Pool *pgxpool.Pool
	// Consumer whose rows are cleaned. Required.
	Consumer string
	// Retention is how long an applied event's id is kept. It must exceed the
	// longest window in which the event can still arrive again: broker
	// redeliveries, the gap wait, and an operator replaying parked or
	// dead-lettered messages. Under PerAggregate a redelivery after the
	// retention is still dropped (as Stale) by the aggregate's cursor.
	// Default 168h (7 days); at least 1h.
	Retention time.Duration
	// BatchSize is the most rows one DELETE removes. Each batch is its own
	// short transaction, so the cleaner never holds back vacuum. Default
	// 1000; 1 to 1000.
	BatchSize int
	// Interval between rounds. Default 10m.
	Interval time.Duration
	// Timeout bounds one DELETE statement. Default 30s.
	Timeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Metrics counts the rows each round deletes and when it finished
	// (ferry_inbox_cleaned_rows_total, ferry_inbox_cleaned_timestamp_seconds).
	// A *metrics.Consumer is one. Nil: not counted.
	Metrics CleanerMetrics
}

// Cleaner deletes inbox rows past their retention in bounded batches. Any
// number of instances may run: a session advisory lock per consumer lets one
// of them clean at a time and the others skip the round.
type Cleaner struct {
	cfg  CleanerConfig
	log  *slog.Logger
	lock int64

	run startstop.Runner
}

// NewCleaner validates cfg and fills its defaults.
func NewCleaner(cfg CleanerConfig) (*Cleaner, error) {
	cfg.Retention = cmp.Or(cfg.Retention, 168*time.Hour)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 1000)
	cfg.Interval = cmp.Or(cfg.Interval, 10*time.Minute)
	if cfg.Metrics == nil {
		cfg.Metrics = noCleanerMetrics{}
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, 30*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	switch {
	case cfg.Pool == nil:
		return nil, errors.New("inbox: CleanerConfig.Pool is nil")
	case !consumerName.MatchString(cfg.Consumer):
		return nil, fmt.Errorf("inbox: CleanerConfig.Consumer %q: use 1-100 letters, digits, '_', '.', ':' or '-'", cfg.Consumer)
	case cfg.Retention < time.Hour:
		return nil, fmt.Errorf("inbox: CleanerConfig.Retention %s: must be at least 1h (and longer than any redelivery or replay window)", cfg.Retention)
	case cfg.BatchSize < 1 || cfg.BatchSize > 1000:
		return nil, fmt.Errorf("inbox: CleanerConfig.BatchSize %d: must be 1 to 1000", cfg.BatchSize)
	case cfg.Interval < time.Second:
		return nil, fmt.Errorf("inbox: CleanerConfig.Interval %s: must be at least 1s", cfg.Interval)
	case cfg.Timeout <= 0:
		return nil, fmt.Errorf("inbox: CleanerConfig.Timeout %s: must be positive", cfg.Timeout)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte("ferry.inbox.clean:" + cfg.Consumer))
	return &Cleaner{
		cfg:  cfg,
		log:  cfg.Logger.With("component", "inbox-cleaner", "consumer", cfg.Consumer),
		lock: int64(h.Sum64()),
	}, nil
}

const (
	// Oldest first, through inbox_processed_events_retention_idx. The cutoff
	// is the database's clock, so skewed application clocks cannot shorten
	// the retention.
	sqlDeleteBatch = `
DELETE FROM inbox_processed_events
WHERE consumer_name = $1 AND event_id IN (
    SELECT event_id FROM inbox_processed_events
    WHERE consumer_name = $1 AND processed_at < now() - make_interval(secs => $2)
    ORDER BY processed_at
    LIMIT $3)`

	// Session-level and keyed by schema and consumer: held for one round on
	// one dedicated connection, released with it if the process dies.
	sqlTryLock = `SELECT pg_try_advisory_lock(hashtext(current_schema()), $1::int)`
	sqlUnlock  = `SELECT pg_advisory_unlock(hashtext(current_schema()), $1::int)`
)

// RunOnce deletes expired rows batch by batch until a batch comes back short.
// It returns the number deleted, and 0 without error when another runner
// holds the lock.
func (c *Cleaner) RunOnce(ctx context.Context) (int, error) {
	conn, err := c.cfg.Pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("inbox cleaner: acquire connection: %w", err)
	}
	defer conn.Release()
	// Two int4 keys: the pg_advisory_lock(int, int) space, apart from
	// Ferry's other (single bigint / xact) locks.
	key := int32(c.lock)
	var got bool
	if err := conn.QueryRow(ctx, sqlTryLock, key).Scan(&got); err != nil {
		return 0, fmt.Errorf("inbox cleaner: lock: %w", err)
	}
	if !got {
		c.log.Debug("another cleaner is running; skipping this round")
		c.cfg.Metrics.InboxRoundDone(c.cfg.Consumer)
		return 0, nil
	}
	defer func() {
		// Detached: ctx may be why we return, and a lock left held would
		// stay with the pooled connection.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, sqlUnlock, key); err != nil {
			// Do not return a connection that may still hold the lock.
			_ = conn.Conn().Close(uctx)
		}
	}()

	total := 0
	for {
		qctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		tag, err := conn.Exec(qctx, sqlDeleteBatch, c.cfg.Consumer, c.cfg.Retention.Seconds(), c.cfg.BatchSize)
		cancel()
		if err != nil {
			return total, fmt.Errorf("inbox cleaner: delete expired rows: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		c.cfg.Metrics.InboxCleaned(c.cfg.Consumer, n)
		if n < c.cfg.BatchSize {
			c.cfg.Metrics.InboxRoundDone(c.cfg.Consumer)
			return total, nil
		}
	}
}

// Start runs a round now and then every Interval until Stop. It returns at
// once.
func (c *Cleaner) Start(ctx context.Context) error {
	if err := c.run.Start(ctx, c.loop); err != nil {
		return fmt.Errorf("inbox cleaner: %w", err)
	}
	// The stall alert's clock starts now: a cleaner that fails every round
	// from its start is a day old there after a day.
	c.cfg.Metrics.InboxCleanerStarted(c.cfg.Consumer)
	return nil
}

// Stop ends the loop and waits for the batch in hand. Safe to call more than
// once.
func (c *Cleaner) Stop() { c.run.Stop() }

func (c *Cleaner) loop(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		n, err := c.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			c.log.Warn("inbox cleaning failed; retrying next round", "error", err, "retry_in", c.cfg.Interval)
		case n > 0:
			c.log.Info("deleted expired inbox rows", "rows", n, "retention", c.cfg.Retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
