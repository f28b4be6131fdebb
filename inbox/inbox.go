package inbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Ordering is a consumer's policy for aggregate versions.
type Ordering int

const (
	// PerAggregate (the default) applies the events of one aggregate in
	// version order, each once: version last+1 is applied, a version at or
	// below last is Stale, a version above last+1 is a Gap.
	PerAggregate Ordering = iota
	// Unordered applies every new event id whatever its version; only
	// duplicates of an event id are dropped. For consumers whose effects
	// commute (counters, idempotent upserts keyed by the event).
	Unordered
)

func (o Ordering) String() string {
	switch o {
	case PerAggregate:
		return "per-aggregate"
	case Unordered:
		return "unordered"
	}
	return fmt.Sprintf("Ordering(%d)", int(o))
}

// Config configures an Inbox.
type Config struct {
	// Pool reaches the inbox tables and the consumer's business tables: the
	// handler's writes commit in the same transaction. Required.
	Pool *pgxpool.Pool
	// Consumer names this consumer: its rows are keyed by it, so several
	// consumers (each with its own queue) can share the tables and each
	// applies every event once. Use the same name for every instance of one
	// consumer. Required; 1-100 letters, digits, '_', '.', ':' or '-'.
	Consumer string
	// Ordering is the version policy. Default PerAggregate.
	Ordering Ordering
}

// Event is one delivery as the inbox sees it, independent of the broker.
type Event struct {
	// ID is the event id (the AMQP message_id). Required, at most 200 bytes.
	ID               string
	AggregateType    string
	AggregateID      string
	AggregateVersion int64
	EventType        string
	// SchemaVersion is the version of Payload's shape (after any upcast).
	SchemaVersion int
	Payload       []byte
	// Timestamp is when the producer committed the event, if known.
	Timestamp time.Time
	// DueAt is when a delayed event (outbox.Event.DeliverAfter) became
	// deliverable, from the message's ferry-due-at header; zero for an
	// event that was not delayed.
	DueAt time.Time
	// Headers are the producer's headers (outbox.Event.Headers): package
	// consumer fills them from the message's string-valued AMQP headers
	// whose names a producer may set (outbox.CheckHeaderName), so never
	// Ferry's or RabbitMQ's. Nil when there are none.
	Headers map[string]string
}

// Handler applies one event's effect with tx, the inbox's transaction. It must
// do all its writes through tx and must not commit or roll it back. An error
// rolls everything back; the event is retried by redelivery.
type Handler func(ctx context.Context, tx pgx.Tx, ev Event) error

// Outcome is what Process did with an event.
type Outcome int

const (
	// Applied: the handler ran and its writes committed with the inbox rows.
	Applied Outcome = iota + 1
	// Duplicate: this consumer already applied the event id; nothing was
	// written. Acknowledge it.
	Duplicate
	// Stale: another event of the aggregate with this or a later version was
	// applied already; nothing was written. Acknowledge it.
	Stale
	// Gap: a version between the last applied one and this one has not been
	// applied yet; nothing was written. Hold or delay the event.
	Gap
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Stale:
		return "stale"
	case Gap:
		return "gap"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is the outcome of Process and the aggregate's last applied version
// after it (0 under Unordered).
type Result struct {
	Outcome     Outcome
	LastApplied int64
}

var (
	// ErrInvalidEvent: the event lacks what the inbox needs (an id; under
	// PerAggregate an aggregate and a version ≥ 1). Not retryable: the same
	// delivery fails the same way, so quarantine it.
	ErrInvalidEvent = errors.New("invalid event")
)

// HandlerError is a failure returned by the Handler. Nothing committed; the
// event may succeed when redelivered, or fail for good (a poison message),
// which the caller limits by counting deliveries. Errors of Process that are
// not HandlerError nor ErrInvalidEvent come from PostgreSQL (begin, the inbox
// statements, commit) and are retryable; after a failed commit the outcome
// is unknown, and a redelivery settles it through the primary key.
type HandlerError struct {
	Err error
}

func (e *HandlerError) Error() string { return "handler: " + e.Err.Error() }
func (e *HandlerError) Unwrap() error { return e.Err }

var consumerName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,100}$`)

// Inbox applies events once per consumer. It is safe for concurrent use, by
// any number of instances of the consumer.
type Inbox struct {
	cfg Config
}

// New validates cfg.
func New(cfg Config) (*Inbox, error) {
	if cfg.Pool == nil {
		return nil, errors.New("inbox: Config.Pool is nil")
	}
	if !consumerName.MatchString(cfg.Consumer) {
		return nil, fmt.Errorf("inbox: Config.Consumer %q: use 1-100 letters, digits, '_', '.', ':' or '-'", cfg.Consumer)
	}
	if cfg.Ordering != PerAggregate && cfg.Ordering != Unordered {
		return nil, fmt.Errorf("inbox: Config.Ordering %d: use PerAggregate or Unordered", int(cfg.Ordering))
	}
	return &Inbox{cfg: cfg}, nil
}

// Consumer is the consumer name.
func (in *Inbox) Consumer() string { return in.cfg.Consumer }

// Ordering is the version policy.
func (in *Inbox) Ordering() Ordering { return in.cfg.Ordering }

const (
	// The first statement of every Process: it claims the event id for this
	// consumer. A concurrent delivery of the same id (another instance) waits
	// here on the primary key until the first transaction ends, then finds
	// the row (Duplicate) or, after a rollback, claims it itself.
	sqlClaim = `
INSERT INTO inbox_processed_events
    (consumer_name, event_id, aggregate_type, aggregate_id, aggregate_version, event_type)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (consumer_name, event_id) DO NOTHING`

	// Locks the aggregate's cursor until commit: events of one aggregate
	// apply one at a time across all instances, and a later version waits
	// for an earlier one in flight instead of seeing a gap. Taken after the
	// event-id row, always in this order, so two events never deadlock here.
	sqlLockCursor = `
SELECT last_version FROM inbox_aggregates
WHERE consumer_name = $1 AND aggregate_type = $2 AND aggregate_id = $3
FOR UPDATE`

	// First event of an aggregate: a concurrent first insert waits on the
	// primary key and then does nothing; the lock statement runs again.
	sqlCreateCursor = `
INSERT INTO inbox_aggregates (consumer_name, aggregate_type, aggregate_id, last_version)
VALUES ($1, $2, $3, 0)
ON CONFLICT DO NOTHING`

	sqlAdvanceCursor = `
UPDATE inbox_aggregates SET last_version = $4, last_event_id = $5, updated_at = now()
WHERE consumer_name = $1 AND aggregate_type = $2 AND aggregate_id = $3`
)

// Process applies ev with h once for this consumer (see the package doc for
// the outcomes). It returns ErrInvalidEvent for an event it cannot judge, a
// *HandlerError when h failed, and other errors when PostgreSQL did.
func (in *Inbox) Process(ctx context.Context, ev Event, h Handler) (Result, error) {
	if err := in.Validate(ev); err != nil {
		return Result{}, err
	}
	tx, err := in.cfg.Pool.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("inbox: begin: %w", err)
	}
	// A no-op after Commit; after a failure it releases the connection.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	tag, err := tx.Exec(ctx, sqlClaim, in.cfg.Consumer, ev.ID, ev.AggregateType, ev.AggregateID, ev.AggregateVersion, ev.EventType)
	if err != nil {
		return Result{}, fmt.Errorf("inbox: record event %s: %w", ev.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return Result{Outcome: Duplicate}, nil
	}

	var last int64
	if in.cfg.Ordering == PerAggregate {
		last, err = lockCursor(ctx, tx, in.cfg.Consumer, ev)
		if err != nil {
			return Result{}, err
		}
		switch {
		case ev.AggregateVersion <= last:
			return Result{Outcome: Stale, LastApplied: last}, nil
		case ev.AggregateVersion > last+1:
			return Result{Outcome: Gap, LastApplied: last}, nil
		}
	}

	if err := h(ctx, tx, ev); err != nil {
		return Result{}, &HandlerError{Err: err}
	}
	if in.cfg.Ordering == PerAggregate {
		if _, err := tx.Exec(ctx, sqlAdvanceCursor, in.cfg.Consumer, ev.AggregateType, ev.AggregateID, ev.AggregateVersion, ev.ID); err != nil {
			return Result{}, fmt.Errorf("inbox: advance %s/%s to v%d: %w", ev.AggregateType, ev.AggregateID, ev.AggregateVersion, err)
		}
		last = ev.AggregateVersion
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("inbox: commit event %s: %w", ev.ID, err)
	}
	return Result{Outcome: Applied, LastApplied: last}, nil
}

func lockCursor(ctx context.Context, tx pgx.Tx, consumer string, ev Event) (int64, error) {
	for range 2 {
		var last int64
		err := tx.QueryRow(ctx, sqlLockCursor, consumer, ev.AggregateType, ev.AggregateID).Scan(&last)
		if err == nil {
			return last, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("inbox: lock %s/%s: %w", ev.AggregateType, ev.AggregateID, err)
		}
		if _, err := tx.Exec(ctx, sqlCreateCursor, consumer, ev.AggregateType, ev.AggregateID); err != nil {
			return 0, fmt.Errorf("inbox: create cursor of %s/%s: %w", ev.AggregateType, ev.AggregateID, err)
		}
	}
	// Unreachable unless someone deletes cursors while we run.
	return 0, fmt.Errorf("inbox: cursor of %s/%s vanished while locking it", ev.AggregateType, ev.AggregateID)
}

// Validate reports, with ErrInvalidEvent, an event that Process would
// refuse. Process calls it itself; callers use it to quarantine early.
func (in *Inbox) Validate(ev Event) error {
	switch {
	case ev.ID == "":
		return fmt.Errorf("%w: no event id (message_id)", ErrInvalidEvent)
	case len(ev.ID) > 200:
		return fmt.Errorf("%w: event id longer than 200 bytes", ErrInvalidEvent)
	case in.cfg.Ordering == Unordered:
		return nil
	case ev.AggregateType == "" || ev.AggregateID == "":
		return fmt.Errorf("%w: event %s has no aggregate type or id, which ordering per aggregate needs", ErrInvalidEvent, ev.ID)
	case ev.AggregateVersion < 1:
		return fmt.Errorf("%w: event %s has aggregate version %d; versions start at 1", ErrInvalidEvent, ev.ID, ev.AggregateVersion)
	}
	return nil
}
