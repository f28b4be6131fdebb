package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
)

// RelayConfig configures the plain relay.
type RelayConfig struct {
	// PostgresURL connects to the schema that holds outbox_events. Required.
	PostgresURL string
	// AMQPURL of the broker. Required.
	AMQPURL string
	// Exchange is the durable topic exchange to publish to. Required.
	Exchange string
	// BatchSize is the most rows one claim takes. Default 500.
	BatchSize int
	// PollInterval is how long the relay sleeps after a short claim when no
	// NOTIFY wakes it first. Default 1s, as Ferry's poller.
	PollInterval time.Duration
	// Logger; default discards.
	Logger *slog.Logger
}

// Relay is the benchmark's physical reference: the least a relay must do to
// deliver outbox rows at least once and in order per aggregate, with no
// workflow engine. One loop: claim pending rows with SKIP LOCKED inside a
// transaction, publish them with pipelined confirms, mark them published,
// commit. It wakes on the schema's NOTIFY and polls as a fallback.
//
// It is not a product: one instance, no lease (the claim's row locks last
// until the commit), no retries beyond "try the batch again".
type Relay struct {
	cfg  RelayConfig
	pub  *broker.Publisher
	pool *pgxpool.Pool
	wake chan struct{}
	// Published counts rows marked published so far; read it only after
	// Run returned.
	Published int
}

// NewRelay validates cfg and fills its defaults.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 500)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	switch {
	case cfg.PostgresURL == "":
		return nil, errors.New("bench: RelayConfig.PostgresURL is empty")
	case cfg.AMQPURL == "":
		return nil, errors.New("bench: RelayConfig.AMQPURL is empty")
	case cfg.Exchange == "":
		return nil, errors.New("bench: RelayConfig.Exchange is empty")
	case cfg.BatchSize < 1 || cfg.BatchSize > 10_000:
		return nil, fmt.Errorf("bench: RelayConfig.BatchSize %d: must be between 1 and 10000", cfg.BatchSize)
	case cfg.PollInterval < 0:
		return nil, fmt.Errorf("bench: RelayConfig.PollInterval %s: must not be negative", cfg.PollInterval)
	}
	pub, err := broker.New(broker.Config{URL: cfg.AMQPURL, Exchange: cfg.Exchange})
	if err != nil {
		return nil, fmt.Errorf("bench: relay publisher: %w", err)
	}
	return &Relay{cfg: cfg, pub: pub, wake: make(chan struct{}, 1)}, nil
}

// Run connects, calls ready (when not nil) once PostgreSQL, the LISTEN
// connection and RabbitMQ answer, and relays until ctx ends. It returns nil
// when ctx ends, an error when it cannot connect at all.
func (r *Relay) Run(ctx context.Context, ready func()) error {
	pool, err := pgxpool.New(ctx, r.cfg.PostgresURL)
	if err != nil {
		return fmt.Errorf("relay: open pool: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("relay: reach PostgreSQL: %w", err)
	}
	r.pool = pool
	defer r.pub.Close()
	if err := r.pub.Connect(ctx); err != nil {
		return fmt.Errorf("relay: reach RabbitMQ: %w", err)
	}
	listening := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.listen(ctx, listening)
	}()
	defer func() { <-done }()
	select {
	case <-listening:
	case <-ctx.Done():
		return nil
	}
	if ready != nil {
		ready()
	}
	for ctx.Err() == nil {
		claimed, sent, err := r.runOnce(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.cfg.Logger.Warn("relay batch failed; trying again in 1s", "error", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		// A full claim that published something: more is waiting. A claim
		// that could publish nothing waits for the rows it lacks.
		if claimed == r.cfg.BatchSize && sent > 0 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-time.After(r.cfg.PollInterval):
		}
	}
	return nil
}

// listen wakes the loop on every NOTIFY of the outbox trigger, redialling
// its dedicated connection after a failure. It closes listening once the
// first LISTEN succeeded.
func (r *Relay) listen(ctx context.Context, listening chan struct{}) {
	first := true
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, r.cfg.PostgresURL)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN ferry_outbox")
		}
		if err == nil {
			if first {
				close(listening)
				first = false
			}
			for err == nil {
				_, err = conn.WaitForNotification(ctx)
				if err == nil {
					select {
					case r.wake <- struct{}{}:
					default:
					}
				}
			}
		}
		if conn != nil {
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
		}
		if ctx.Err() == nil {
			r.cfg.Logger.Warn("relay LISTEN connection failed; redialling in 1s", "error", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

// sqlRelayClaim locks the oldest pending rows for this transaction, with
// each aggregate's delivered version. The locks, not a lease, keep the rows
// the relay's until the commit: one instance needs no more.
const sqlRelayClaim = `
SELECT e.id::text, e.aggregate_type, e.aggregate_id, e.aggregate_version, e.event_type,
       e.schema_version, e.payload, e.created_at, a.delivered_version
FROM outbox_events e
JOIN outbox_aggregates a USING (aggregate_type, aggregate_id)
WHERE e.status = 'pending' AND e.next_attempt_at <= now()
ORDER BY e.next_attempt_at
LIMIT $1
FOR UPDATE OF e SKIP LOCKED`

// sqlRelayMarkEvents marks the published rows; sqlRelayMarkAggregates
// advances each aggregate's delivered version, as Ferry's publish activity
// does. published_at is the statement's time, not the transaction's
// (now(), the claim's): the burst-start workloads time a delivery by it.
const sqlRelayMarkEvents = `
UPDATE outbox_events SET status = 'published', published_at = statement_timestamp(), attempts = attempts + 1
WHERE id = ANY($1::uuid[])`

const sqlRelayMarkAggregates = `
UPDATE outbox_aggregates a
SET delivered_version = GREATEST(a.delivered_version, d.version), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS d(aggregate_type, aggregate_id, version)
WHERE a.aggregate_type = d.aggregate_type AND a.aggregate_id = d.aggregate_id`

type relayRow struct {
	id, aggType, aggID, eventType string
	version, delivered            int64
	schemaVersion                 int32
	payload                       []byte
	createdAt                     time.Time
}

// runOnce relays one batch and returns the number of rows claimed and of
// those published.
func (r *Relay) runOnce(ctx context.Context) (claimed, sent int, err error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, sqlRelayClaim, r.cfg.BatchSize)
	if err != nil {
		return 0, 0, fmt.Errorf("claim: %w", err)
	}
	rowsClaimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (relayRow, error) {
		var x relayRow
		err := row.Scan(&x.id, &x.aggType, &x.aggID, &x.version, &x.eventType, &x.schemaVersion, &x.payload, &x.createdAt, &x.delivered)
		return x, err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("claim: %w", err)
	}
	if len(rowsClaimed) == 0 {
		return 0, 0, nil
	}
	send := inOrder(rowsClaimed)
	if len(send) == 0 {
		return len(rowsClaimed), 0, nil
	}
	msgs := make([]broker.Message, len(send))
	for i, x := range send {
		msgs[i] = broker.Message{
			ID: x.id, Type: x.eventType, RoutingKey: rabbitmq.DefaultRoutingKey(x.aggType, x.eventType),
			Headers: amqp.Table{
				broker.HeaderAggregateType:    x.aggType,
				broker.HeaderAggregateID:      x.aggID,
				broker.HeaderAggregateVersion: x.version,
				broker.HeaderSchemaVersion:    int64(x.schemaVersion),
			},
			Body: x.payload, Timestamp: x.createdAt,
		}
	}
	if _, err := r.pub.PublishBatch(ctx, msgs); err != nil {
		// Roll back: every row stays pending and is published again, so
		// what the broker did take is duplicated, never lost.
		return 0, 0, fmt.Errorf("publish: %w", err)
	}
	ids := make([]string, len(send))
	var types, aggIDs []string
	var versions []int64
	for i, x := range send {
		ids[i] = x.id
		// send is sorted by aggregate: its last row of each is the highest.
		if i+1 == len(send) || send[i+1].aggType != x.aggType || send[i+1].aggID != x.aggID {
			types, aggIDs, versions = append(types, x.aggType), append(aggIDs, x.aggID), append(versions, x.version)
		}
	}
	if _, err := tx.Exec(ctx, sqlRelayMarkEvents, ids); err != nil {
		return 0, 0, fmt.Errorf("mark published: %w", err)
	}
	if _, err := tx.Exec(ctx, sqlRelayMarkAggregates, types, aggIDs, versions); err != nil {
		return 0, 0, fmt.Errorf("advance delivered versions: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	r.Published += len(send)
	return len(rowsClaimed), len(send), nil
}

// inOrder returns the rows to publish now: per aggregate, in version order,
// only the unbroken run after its delivered version. A claim ordered by
// next_attempt_at can hold version n+1 without n (n's transaction started
// later but took the version lock first, so its default next_attempt_at is
// later); n+1 then waits for the next claim.
func inOrder(rows []relayRow) []relayRow {
	slices.SortFunc(rows, func(a, b relayRow) int {
		return cmp.Or(strings.Compare(a.aggType, b.aggType), strings.Compare(a.aggID, b.aggID), cmp.Compare(a.version, b.version))
	})
	out := rows[:0:0]
	var next int64
	for i, x := range rows {
		if i == 0 || x.aggType != rows[i-1].aggType || x.aggID != rows[i-1].aggID {
			next = x.delivered + 1
		}
		if x.version == next {
			out = append(out, x)
			next++
		}
	}
	return out
}
