package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/propagation"
)

// DBTX is what Write needs from the caller: a pgx.Tx, or anything with the
// same methods (a pgxpool.Tx, a pgx.Conn inside BEGIN).
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Event is one outbox event as the producer describes it.
type Event struct {
	// ID is the event's identity: the broker message id and the consumers'
	// deduplication key. Zero means a new time-ordered UUID (v7).
	ID uuid.UUID
	// AggregateType names the kind of entity, e.g. "order". Letters, digits,
	// '_', '.', '-'; at most 100 bytes. Part of the routing key.
	AggregateType string
	// AggregateID identifies the entity within its type: 1-200 bytes of
	// valid UTF-8 without control characters (C0, DEL, C1), so "müller" or
	// "製品-7" do. It becomes part of the Temporal workflow ID: an id of
	// printable ASCII as it is ("ferry/<type>/<id>"), any other escaped
	// (workflows.WorkflowID). The limit counts bytes, not characters, so that
	// the escaped form stays under Temporal's ID length limit. The row, the
	// AMQP headers and a workflow destination's envelope carry the id as
	// written. Never put personal data here.
	AggregateID string
	// AggregateVersion is the event's position within its aggregate, 1, 2, 3…
	// Zero lets Ferry assign the next one. A caller with its own
	// optimistic-concurrency column passes that value; a taken version fails
	// with ErrVersionConflict, a skipped one with ErrVersionGap.
	AggregateVersion int64
	// EventType names what happened, e.g. "created". Same characters as
	// AggregateType.
	EventType string
	// SchemaVersion of the payload's shape, at most math.MaxInt32 (the
	// column is an integer). Zero means 1.
	SchemaVersion int
	// Payload is a JSON document.
	Payload json.RawMessage
	// Headers are string headers that travel with the event: as AMQP
	// headers beside Ferry's own, and in a workflow destination's input.
	// Nil or empty means none. At most MaxHeaders, names matching
	// HeaderNamePattern and not reserved (ReservedHeader: ferry-*, x-*,
	// message_id, message-id, traceparent, tracestate, in any case), values
	// valid UTF-8 without NUL, names and values together at most
	// MaxHeadersBytes. Never put secrets here: headers are not redacted.
	Headers map[string]string
	// DeliverAfter asks for the event not to be delivered before this time,
	// as the database's clock tells it. Zero, or a time already past, means
	// at once. The aggregate's later events wait for it too: each is
	// delivered after this one, in version order. At most Config.MaxDelay
	// ahead of this process's clock.
	DeliverAfter time.Time
}

// Written is what Write reports for each stored event.
type Written struct {
	ID               uuid.UUID
	AggregateVersion int64
}

// Config configures a Writer.
type Config struct {
	// MaxPayloadBytes rejects larger payloads before they reach the database.
	// Default 1 MiB: well below Temporal's 2 MB payload limit and RabbitMQ's
	// 16 MiB message limit.
	MaxPayloadBytes int
	// MaxBatch is the most events one WriteBatch call takes. Default 1000.
	MaxBatch int
	// MaxDelay is how far ahead of now Event.DeliverAfter may be. A delayed
	// event holds every later event of its aggregate, so a time years
	// ahead (a unit mistake) would stop the aggregate for as long. Default
	// DefaultMaxDelay (30 days).
	MaxDelay time.Duration
}

// DefaultMaxDelay is Config.MaxDelay's default.
const DefaultMaxDelay = 30 * 24 * time.Hour

// Writer writes outbox events. It is safe for concurrent use and holds no
// connection.
type Writer struct {
	cfg        Config
	propagator propagation.TextMapPropagator
}

// Sentinel errors. Each names a producer mistake: none is retryable as is.
var (
	// ErrInvalidEvent wraps every validation failure; the message names the field.
	ErrInvalidEvent = errors.New("invalid outbox event")
	// ErrVersionConflict: the aggregate already has this version. Reload the
	// aggregate and retry the whole transaction.
	ErrVersionConflict = errors.New("aggregate version conflict")
	// ErrVersionGap: the caller's version skips versions of the aggregate.
	ErrVersionGap = errors.New("aggregate version gap")
	// ErrDuplicateID: an event with this id already exists.
	ErrDuplicateID = errors.New("duplicate event id")
)

// NewWriter validates cfg and fills its defaults.
func NewWriter(cfg Config) (*Writer, error) {
	cfg.MaxPayloadBytes = cmp.Or(cfg.MaxPayloadBytes, DefaultMaxPayloadBytes)
	cfg.MaxBatch = cmp.Or(cfg.MaxBatch, 1000)
	cfg.MaxDelay = cmp.Or(cfg.MaxDelay, DefaultMaxDelay)
	if cfg.MaxPayloadBytes < 0 || cfg.MaxPayloadBytes > 16<<20 {
		return nil, fmt.Errorf("outbox: Config.MaxPayloadBytes %d: must be between 1 and %d (RabbitMQ's default limit)", cfg.MaxPayloadBytes, 16<<20)
	}
	if cfg.MaxBatch < 0 {
		return nil, fmt.Errorf("outbox: Config.MaxBatch %d: must be positive", cfg.MaxBatch)
	}
	if cfg.MaxDelay < 0 {
		return nil, fmt.Errorf("outbox: Config.MaxDelay %s: must be positive", cfg.MaxDelay)
	}
	return &Writer{cfg: cfg, propagator: propagation.TraceContext{}}, nil
}

// Write stores one event in the caller's transaction.
func (w *Writer) Write(ctx context.Context, tx DBTX, ev Event) (Written, error) {
	out, err := w.WriteBatch(ctx, tx, []Event{ev})
	if err != nil {
		return Written{}, err
	}
	return out[0], nil
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)

// Validate reports the first problem with ev, naming the field.
func (w *Writer) Validate(ev Event) error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s %s", ErrInvalidEvent, field, fmt.Sprintf(format, args...))
	}
	switch {
	case ev.AggregateType == "":
		return bad("AggregateType", "is empty")
	case !namePattern.MatchString(ev.AggregateType):
		return bad("AggregateType", "%q: use 1-100 letters, digits, '_', '.' or '-'", ev.AggregateType)
	case ev.AggregateID == "":
		return bad("AggregateID", "is empty")
	case len(ev.AggregateID) > MaxAggregateIDBytes:
		return bad("AggregateID", "is %d bytes of UTF-8, over the limit of %d", len(ev.AggregateID), MaxAggregateIDBytes)
	case undeliverable(ev.AggregateID) != "":
		return bad("AggregateID", "%s", undeliverable(ev.AggregateID))
	case ev.EventType == "":
		return bad("EventType", "is empty")
	case !namePattern.MatchString(ev.EventType):
		return bad("EventType", "%q: use 1-100 letters, digits, '_', '.' or '-'", ev.EventType)
	case ev.AggregateVersion < 0:
		return bad("AggregateVersion", "%d: must be 0 (assign) or at least 1", ev.AggregateVersion)
	case ev.SchemaVersion < 0 || ev.SchemaVersion > math.MaxInt32:
		return bad("SchemaVersion", "%d: must be between 1 and %d (0 means 1)", ev.SchemaVersion, math.MaxInt32)
	case ev.DeliverAfter.After(time.Now().Add(w.cfg.MaxDelay)):
		return bad("DeliverAfter", "%s is more than %s ahead (Config.MaxDelay): every later event of the aggregate would wait as long",
			ev.DeliverAfter.Format(time.RFC3339), w.cfg.MaxDelay)
	}
	if err := ValidateHeaders(ev.Headers); err != nil {
		return err
	}
	return ValidatePayload(ev.Payload, w.cfg.MaxPayloadBytes)
}

// MaxAggregateIDBytes is the longest AggregateID in bytes of UTF-8, as the
// schema checks it (outbox_events_aggregate_id_bytes; for ASCII also
// outbox_events_aggregate_id_check's 200 characters). With AggregateType's
// 100 bytes the workflow ID stays at most workflows.MaxWorkflowIDBytes (708
// bytes, escapes included), under Temporal's limit (limit.maxIDLength, 1000
// by default).
const MaxAggregateIDBytes = 200

// undeliverable says what no workflow ID encoding can save in an aggregate
// id, naming the offset: invalid UTF-8, or a control character (C0, DEL,
// C1: unicode.IsControl), which would show in no list and break terminals.
// Empty: the id is fine. The schema checks the same
// (outbox_events_aggregate_id_printable, in a UTF8 database).
func undeliverable(s string) string {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)):
			return fmt.Sprintf("has byte 0x%02x at offset %d, which is not valid UTF-8", s[i], i)
		case unicode.IsControl(r):
			return fmt.Sprintf("has control character %U at offset %d: use printable characters", r, i)
		}
	}
	return ""
}

// ValidatePayload checks a payload the way Validate does: a non-empty JSON
// document of at most maxBytes that jsonb can store. It is pure, so
// workflows may call it too (repairs that patch a payload).
func ValidatePayload(payload []byte, maxBytes int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: Payload %s", ErrInvalidEvent, fmt.Sprintf(format, args...))
	}
	switch {
	case len(payload) == 0:
		return bad("is empty: send a JSON document such as {}")
	case len(payload) > maxBytes:
		return bad("is %d bytes, over the limit of %d (Config.MaxPayloadBytes): store large data elsewhere and send a reference", len(payload), maxBytes)
	case !json.Valid(payload):
		return bad("is not valid JSON")
	case hasNULEscape(payload):
		return bad(`contains \u0000, which PostgreSQL's jsonb cannot store`)
	}
	return nil
}

// DefaultMaxPayloadBytes is Config.MaxPayloadBytes' default.
const DefaultMaxPayloadBytes = 1 << 20

// hasNULEscape reports a \u0000 escape in valid JSON. Backslashes occur only
// inside strings there, each escaping the next character, so skipping the
// escaped character is enough to tell "\u0000" from "\\u0000".
func hasNULEscape(doc []byte) bool {
	for i := 0; i < len(doc)-1; i++ {
		if doc[i] != '\\' {
			continue
		}
		if doc[i+1] == 'u' && i+6 <= len(doc) && string(doc[i+2:i+6]) == "0000" {
			return true
		}
		i++
	}
	return false
}

// sqlInsert inserts the whole batch in one round trip. A NULL version is
// filled by the outbox_assign_version trigger, row by row in input order
// (WITH ORDINALITY keeps that order), so a batch for one aggregate gets
// consecutive versions. The trigger also turns deliver_after into the
// row's next_attempt_at, and holds the aggregate's later versions behind it
// (migration 0009).
const sqlInsert = `
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload, headers, deliver_after, trace_parent, trace_state)
SELECT e.id, e.aggregate_type, e.aggregate_id, e.aggregate_version, e.event_type, e.schema_version, e.payload, e.headers, e.deliver_after, $10, $11
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::int[], $7::jsonb[], $8::jsonb[], $9::timestamptz[])
     WITH ORDINALITY AS e(id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload, headers, deliver_after, n)
ORDER BY e.n
RETURNING id, aggregate_version`

// WriteBatch stores events in the caller's transaction, in order, and
// returns their ids and versions in the same order. It either stores all of
// them or returns an error; the caller should then roll back.
func (w *Writer) WriteBatch(ctx context.Context, tx DBTX, events []Event) ([]Written, error) {
	if len(events) == 0 {
		return nil, fmt.Errorf("%w: batch is empty", ErrInvalidEvent)
	}
	if len(events) > w.cfg.MaxBatch {
		return nil, fmt.Errorf("%w: batch has %d events, over the limit of %d (Config.MaxBatch)", ErrInvalidEvent, len(events), w.cfg.MaxBatch)
	}
	var (
		ids      = make([]uuid.UUID, len(events))
		aggTypes = make([]string, len(events))
		aggIDs   = make([]string, len(events))
		versions = make([]*int64, len(events))
		types    = make([]string, len(events))
		schemas  = make([]int32, len(events))
		payloads = make([]string, len(events))
		headers  = make([]*string, len(events))
		after    = make([]pgtype.Timestamptz, len(events))
		seen     = make(map[uuid.UUID]bool, len(events))
	)
	for i, ev := range events {
		if err := w.Validate(ev); err != nil {
			if len(events) > 1 {
				return nil, fmt.Errorf("event %d of the batch: %w", i, err)
			}
			return nil, err
		}
		id := ev.ID
		if id == uuid.Nil {
			var err error
			if id, err = uuid.NewV7(); err != nil {
				return nil, fmt.Errorf("new event id: %w", err)
			}
		}
		if seen[id] {
			return nil, fmt.Errorf("%w: %s appears twice in the batch", ErrDuplicateID, id)
		}
		seen[id] = true
		ids[i], aggTypes[i], aggIDs[i], types[i] = id, ev.AggregateType, ev.AggregateID, ev.EventType
		if ev.AggregateVersion > 0 {
			v := ev.AggregateVersion
			versions[i] = &v
		}
		schemas[i] = int32(max(ev.SchemaVersion, 1))
		payloads[i] = string(ev.Payload)
		h, err := headersJSON(ev.Headers)
		if err != nil {
			return nil, err
		}
		headers[i] = h
		// NULL unless the time may be ahead of the database's clock: a
		// long-past time means "at once" just the same, and stays clear of
		// PostgreSQL's range of timestamps.
		if ev.DeliverAfter.After(epoch) {
			after[i] = pgtype.Timestamptz{Time: ev.DeliverAfter, Valid: true}
		}
	}
	carrier := propagation.MapCarrier{}
	w.propagator.Inject(ctx, carrier)

	rows, err := tx.Query(ctx, sqlInsert, ids, aggTypes, aggIDs, versions, types, schemas, payloads, headers, after,
		nullIfEmpty(carrier.Get("traceparent")), nullIfEmpty(carrier.Get("tracestate")))
	if err != nil {
		return nil, translate(err)
	}
	got := make(map[uuid.UUID]int64, len(events))
	for rows.Next() {
		var id uuid.UUID
		var v int64
		if err := rows.Scan(&id, &v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("insert outbox events: %w", err)
		}
		got[id] = v
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	out := make([]Written, len(events))
	for i, id := range ids {
		v, ok := got[id]
		if !ok {
			return nil, fmt.Errorf("insert outbox events: no row came back for event %s", id)
		}
		out[i] = Written{ID: id, AggregateVersion: v}
	}
	return out, nil
}

// translate maps the schema's constraint errors to sentinels, keeping the
// database's message (it names the aggregate and the versions).
func translate(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.ConstraintName == "outbox_events_aggregate_version_key":
			return fmt.Errorf("%w: %s", ErrVersionConflict, pgErr.Message)
		case pgErr.ConstraintName == "outbox_events_aggregate_version_gap":
			return fmt.Errorf("%w: %s", ErrVersionGap, pgErr.Message)
		case pgErr.ConstraintName == "outbox_events_pkey":
			return fmt.Errorf("%w: %s", ErrDuplicateID, pgErr.Detail)
		case pgErr.Code == "23514" && checkedField[pgErr.ConstraintName] != "":
			// Validate checks the same rules first, so this is a schema
			// stricter than this binary. The detail (the whole row, payload
			// included) stays out of the message.
			return fmt.Errorf("%w: %s refused by the schema (%s): %w", ErrInvalidEvent,
				checkedField[pgErr.ConstraintName], pgErr.ConstraintName, err)
		case pgErr.Code == "42P01", pgErr.Code == "42703":
			// No table, or no column (headers: 0008): a schema older
			// than this binary.
			return fmt.Errorf("insert outbox events: %w (run `ferry migrate`)", err)
		}
	}
	return fmt.Errorf("insert outbox events: %w", err)
}

// checkedField names the Event field each CHECK constraint of
// outbox_events is about.
var checkedField = map[string]string{
	"outbox_events_aggregate_type_check":    "AggregateType",
	"outbox_events_aggregate_id_check":      "AggregateID",
	"outbox_events_aggregate_id_printable":  "AggregateID",
	"outbox_events_aggregate_id_bytes":      "AggregateID",
	"outbox_events_aggregate_version_check": "AggregateVersion",
	"outbox_events_event_type_check":        "EventType",
	"outbox_events_schema_version_check":    "SchemaVersion",
	"outbox_events_headers_valid":           "Headers",
	"outbox_events_deliver_after_finite":    "DeliverAfter",
}

// epoch: DeliverAfter at or before it is sent as NULL (at once).
var epoch = time.Unix(0, 0)

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
