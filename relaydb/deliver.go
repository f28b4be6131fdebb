package relaydb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file holds the writes and reads of the delivery side: the aggregate
// workflow's activities publish rows, mark them, hand them back, and the
// scheduled maintenance deletes, re-dispatches and checks them.

// Execer is what the delivery statements need: a *pgxpool.Pool, a pgx.Tx
// or a *pgx.Conn.
type Execer interface {
	Queryer
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// HeldPrefix starts the last_error of a row a blocked workflow handed back
// (Hold); the poller's dispatch mark leaves such rows pending, ReleaseHeld
// finds them by it.
const HeldPrefix = "held: "

// PublishRow is what a publish reads of an outbox row.
type PublishRow struct {
	AggregateType, AggregateID, EventType string
	Version                               int64
	SchemaVersion                         int32
	// TraceParent and TraceState are empty when the row has none.
	TraceParent, TraceState string
	CreatedAt               time.Time
	// DueAt is when the row became deliverable: CreatedAt, or its
	// deliver_after when later (a delayed event). Latency counts from it.
	DueAt   time.Time
	Status  string
	Payload []byte
	// Headers are the producer's (Event.Headers); nil when the row has
	// none.
	Headers map[string]string
}

// fields are scan targets for publishColumns.
func (ev *PublishRow) fields() []any {
	return []any{&ev.AggregateType, &ev.AggregateID, &ev.Version, &ev.EventType,
		&ev.SchemaVersion, &ev.Payload, &ev.TraceParent, &ev.TraceState, &ev.CreatedAt, &ev.Status, headersScanner{&ev.Headers}, &ev.DueAt}
}

// headersScanner scans the headers column into a PublishRow
// (decodeHeaders).
type headersScanner struct{ dst *map[string]string }

func (s headersScanner) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*s.dst = nil
	case string:
		*s.dst = decodeHeaders([]byte(v))
	case []byte:
		*s.dst = decodeHeaders(v)
	default:
		return fmt.Errorf("scan headers: unexpected %T", src)
	}
	return nil
}

// publishColumns are what a publish reads of an outbox row, in the order of
// PublishRow.fields. headers is read as text: headersScanner decodes it.
const publishColumns = `aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
       payload, coalesce(trace_parent, ''), coalesce(trace_state, ''), created_at, status, headers::text,
       greatest(created_at, deliver_after)`

// sqlLoadForPublish reads one row by primary key.
const sqlLoadForPublish = `SELECT ` + publishColumns + ` FROM outbox_events WHERE id = $1`

// LoadForPublish reads the row of event id: pgx.ErrNoRows when there is
// none, PostgreSQL's 22P02 when id is no UUID.
func LoadForPublish(ctx context.Context, db Queryer, id string) (PublishRow, error) {
	var ev PublishRow
	err := db.QueryRow(ctx, sqlLoadForPublish, id).Scan(ev.fields()...)
	return ev, err
}

// sqlLoadManyForPublish reads a batch's rows by primary key in one query.
const sqlLoadManyForPublish = `SELECT id::text, ` + publishColumns + ` FROM outbox_events WHERE id = ANY($1::uuid[])`

// LoadManyForPublish reads the rows of the event ids, keyed by id (lower
// case); ids without a row are missing from the map.
func LoadManyForPublish(ctx context.Context, db Queryer, ids []string) (map[string]PublishRow, error) {
	rs, err := db.Query(ctx, sqlLoadManyForPublish, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]PublishRow, len(ids))
	var (
		id string
		ev PublishRow
	)
	_, err = pgx.ForEachRow(rs, append([]any{&id}, ev.fields()...), func() error {
		out[id] = ev
		ev.Payload = nil // the next row scans into a fresh slice
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// sqlAdvanceCursor follows a CTE ev that changed one row and returned its
// aggregate_type, aggregate_id and aggregate_version: it advances the
// aggregate's delivered_version to that version, which is what lets a later
// run of the workflow resume after the event; GREATEST keeps a late,
// repeated attempt from moving it back.
const sqlAdvanceCursor = `
    RETURNING aggregate_type, aggregate_id, aggregate_version
)
UPDATE outbox_aggregates a
SET delivered_version = GREATEST(a.delivered_version, ev.aggregate_version), updated_at = now()
FROM ev
WHERE a.aggregate_type = ev.aggregate_type AND a.aggregate_id = ev.aggregate_id`

// sqlMarkPublished runs only after the broker's confirm, and advances the
// cursor (sqlAdvanceCursor) in the same statement.
const sqlMarkPublished = `
WITH ev AS (
    UPDATE outbox_events
    SET status = 'published', published_at = now(), last_error = NULL, last_error_class = NULL
    WHERE id = $1` + sqlAdvanceCursor

// MarkPublished marks a confirmed event published and advances its
// aggregate's delivered_version to it. Call it only after the broker
// confirmed the message.
func MarkPublished(ctx context.Context, db Execer, id string) error {
	_, err := db.Exec(ctx, sqlMarkPublished, id)
	return err
}

// sqlMarkBatchPublished marks a confirmed prefix of a batch in one
// statement and advances delivered_version to its highest version, as
// sqlMarkPublished does for one event.
const sqlMarkBatchPublished = `
WITH ev AS (
    UPDATE outbox_events
    SET status = 'published', published_at = now(), last_error = NULL, last_error_class = NULL
    WHERE id = ANY($1::uuid[])
    RETURNING aggregate_version
)
UPDATE outbox_aggregates a
SET delivered_version = GREATEST(a.delivered_version, (SELECT max(aggregate_version) FROM ev)), updated_at = now()
WHERE a.aggregate_type = $2 AND a.aggregate_id = $3 AND EXISTS (SELECT 1 FROM ev)`

// MarkBatchPublished marks confirmed events of one aggregate published and
// advances its delivered_version to the highest of them.
func MarkBatchPublished(ctx context.Context, db Execer, ids []string, aggregateType, aggregateID string) error {
	_, err := db.Exec(ctx, sqlMarkBatchPublished, ids, aggregateType, aggregateID)
	return err
}

// sqlNoteError keeps the latest failure and its class on the row for
// operators; the attempt history itself is in Temporal.
const sqlNoteError = `UPDATE outbox_events SET last_error = $2, last_error_class = nullif($3, '') WHERE id = $1 AND status <> 'published'`

// NoteError stores msg as the row's last_error, and class (the error's
// type; "": none) as its last_error_class, unless it is published.
func NoteError(ctx context.Context, db Execer, id, class, msg string) error {
	_, err := db.Exec(ctx, sqlNoteError, id, msg, class)
	return err
}

// sqlDeliveredVersion reads an aggregate's cursor by its primary key.
const sqlDeliveredVersion = `
SELECT delivered_version FROM outbox_aggregates
WHERE aggregate_type = $1 AND aggregate_id = $2`

// DeliveredVersion is the highest version of the aggregate delivered in
// order; 0 for an aggregate without a row (it has delivered nothing).
func DeliveredVersion(ctx context.Context, db Queryer, aggregateType, aggregateID string) (int64, error) {
	var v int64
	err := db.QueryRow(ctx, sqlDeliveredVersion, aggregateType, aggregateID).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// sqlQuarantine: the row's status says the event is held, last_error why
// and last_error_class its class. A published row stays published (a late
// quarantine of a retried attempt must not hide a success).
const sqlQuarantine = `
UPDATE outbox_events SET status = 'quarantined', last_error = $2, last_error_class = nullif($3, '')
WHERE id = $1 AND status <> 'published'`

// Quarantine marks an unpublished event quarantined with msg as its
// last_error and class as its last_error_class.
func Quarantine(ctx context.Context, db Execer, id, class, msg string) error {
	_, err := db.Exec(ctx, sqlQuarantine, id, msg, class)
	return err
}

// sqlHold hands rows back: pending again, out of the claim for
// HoldInterval, marked so that a poller whose signal of them returned
// after this does not mark them dispatched. A published row stays
// published.
const sqlHold = `
UPDATE outbox_events
SET status = 'pending', next_attempt_at = now() + $2::interval, last_error = $3, last_error_class = NULL
WHERE id = ANY($1::uuid[]) AND status IN ('pending', 'dispatched')`

// Hold hands the rows back as pending, claimable again after interval;
// msg (starting with HeldPrefix) is their last_error.
func Hold(ctx context.Context, db Execer, ids []string, interval time.Duration, msg string) error {
	_, err := db.Exec(ctx, sqlHold, ids, interval, msg)
	return err
}

// sqlReleaseHeld makes an aggregate's held rows claimable now; the unique
// (aggregate_type, aggregate_id, aggregate_version) index finds them.
const sqlReleaseHeld = `
UPDATE outbox_events
SET next_attempt_at = now(), last_error = NULL, last_error_class = NULL
WHERE aggregate_type = $1 AND aggregate_id = $2 AND status = 'pending' AND last_error LIKE '` + HeldPrefix + `%'`

// ReleaseHeld makes the aggregate's held rows claimable at once.
func ReleaseHeld(ctx context.Context, db Execer, aggregateType, aggregateID string) error {
	_, err := db.Exec(ctx, sqlReleaseHeld, aggregateType, aggregateID)
	return err
}

// Retention: delivered rows only: pending, dispatched and quarantined rows
// are never touched, whatever their age. Each statement handles at most
// one batch and commits on its own, so no long transaction holds back
// vacuum.
const (
	sqlPurgePayloads = `
UPDATE outbox_events SET payload = 'null'::jsonb
WHERE id IN (
    SELECT id FROM outbox_events
    WHERE status IN ('published', 'skipped')
      AND coalesce(published_at, created_at) < now() - $1::interval
      AND payload <> 'null'::jsonb
    LIMIT $2)`

	// sqlDeleteDelivered deletes through ferry_delete_delivered (migration
	// 0015): the same statement, in a function the least-privilege relay
	// role may execute though it may not delete events itself.
	sqlDeleteDelivered = `SELECT ferry_delete_delivered($1::interval, $2::int)`
)

// PurgePayloads blanks (JSON null) the payloads of at most limit delivered
// rows older than age and returns how many it blanked. Call it again
// while it returns limit.
func PurgePayloads(ctx context.Context, db Execer, age time.Duration, limit int) (int64, error) {
	tag, err := db.Exec(ctx, sqlPurgePayloads, age, limit)
	return tag.RowsAffected(), err
}

// DeleteDelivered deletes at most limit delivered rows older than age and
// returns how many it deleted. Call it again while it returns limit.
func DeleteDelivered(ctx context.Context, db Execer, age time.Duration, limit int) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, sqlDeleteDelivered, age, limit).Scan(&n)
	return n, err
}

// The retention record (ferry_maintenance, migration 0013): what the last
// retention run found and whether it finished, for /metrics (ReadRetention).
const (
	// sqlCountOverdue counts the delivered rows past age and records the
	// figure, in one statement. published_at has no index, so this reads the
	// whole table: a retention run does it once, at its start; nothing that
	// runs per scrape may.
	sqlCountOverdue = `
UPDATE ferry_maintenance SET counted_at = now(), overdue_rows = (
    SELECT count(*) FROM outbox_events
    WHERE status IN ('published', 'skipped')
      AND coalesce(published_at, created_at) < now() - $1::interval)
WHERE job = 'retention'
RETURNING overdue_rows`

	// sqlRetentionSucceeded: a run that finished deleted what it counted.
	sqlRetentionSucceeded = `
UPDATE ferry_maintenance SET succeeded_at = now(), overdue_rows = 0, counted_at = now()
WHERE job = 'retention'`
)

// CountOverdue counts the delivered rows older than age that retention would
// delete, records the count for /metrics, and returns it. It reads the whole
// table (published_at has no index): call it once per retention run.
// pgx.ErrNoRows: the schema predates ferry_maintenance's row.
func CountOverdue(ctx context.Context, db Queryer, age time.Duration) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, sqlCountOverdue, age).Scan(&n)
	return n, err
}

// RetentionSucceeded records that a retention run finished: nothing past
// its age is left.
func RetentionSucceeded(ctx context.Context, db Execer) error {
	_, err := db.Exec(ctx, sqlRetentionSucceeded)
	return err
}

// AggregateKey names an aggregate.
type AggregateKey struct{ Type, ID string }

// sqlStuckAggregates finds the aggregates with rows dispatched long ago,
// oldest first, through the dispatched rows' partial index (0006). Each row
// also carries the cut-off it used (now() - age), so the statements that
// follow touch only rows dispatched before it: a row re-dispatched since
// has a later dispatched_at.
const sqlStuckAggregates = `
SELECT aggregate_type, aggregate_id, now() - $1::interval
FROM outbox_events
WHERE status = 'dispatched' AND dispatched_at < now() - $1::interval
GROUP BY aggregate_type, aggregate_id
ORDER BY min(dispatched_at)
LIMIT 1000`

// StuckAggregates lists at most 1000 aggregates with rows dispatched more
// than age ago, the longest stuck first, and the cut-off it used: rows
// dispatched before it count as stuck (pass it to StuckRows and the
// Redispatch functions). The cut-off is zero when nothing is stuck.
func StuckAggregates(ctx context.Context, db Queryer, age time.Duration) (keys []AggregateKey, before time.Time, err error) {
	rows, err := db.Query(ctx, sqlStuckAggregates, age)
	if err != nil {
		return nil, before, err
	}
	keys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AggregateKey, error) {
		var k AggregateKey
		return k, r.Scan(&k.Type, &k.ID, &before)
	})
	return keys, before, err
}

// StuckRow is one dispatched row StuckRows found.
type StuckRow struct {
	ID           string
	Version      int64
	DispatchedAt time.Time
}

// sqlStuckRows reads one aggregate's rows dispatched before $3 through the
// (aggregate_type, aggregate_id, aggregate_version) index.
const sqlStuckRows = `
SELECT id::text, aggregate_version, dispatched_at FROM outbox_events
WHERE aggregate_type = $1 AND aggregate_id = $2
  AND status = 'dispatched' AND dispatched_at < $3
ORDER BY aggregate_version
LIMIT 1000`

// StuckRows lists at most 1000 of the aggregate's rows dispatched before
// the cut-off, versions ascending.
func StuckRows(ctx context.Context, db Queryer, aggregateType, aggregateID string, before time.Time) ([]StuckRow, error) {
	rows, err := db.Query(ctx, sqlStuckRows, aggregateType, aggregateID, before)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StuckRow, error) {
		var s StuckRow
		return s, r.Scan(&s.ID, &s.Version, &s.DispatchedAt)
	})
}

// sqlRedispatchAggregate sets an aggregate's rows dispatched before the
// cut-off back to pending, for the poller to claim at once.
const sqlRedispatchAggregate = `
UPDATE outbox_events
SET status = 'pending', next_attempt_at = now(), last_error = $4, last_error_class = NULL
WHERE aggregate_type = $1 AND aggregate_id = $2
  AND status = 'dispatched' AND dispatched_at < $3`

// RedispatchAggregate sets the aggregate's rows dispatched before the
// cut-off back to pending, with msg as their last_error, and returns how
// many. Call it only when no run of the aggregate's workflow is open.
func RedispatchAggregate(ctx context.Context, db Execer, aggregateType, aggregateID string, before time.Time, msg string) (int64, error) {
	tag, err := db.Exec(ctx, sqlRedispatchAggregate, aggregateType, aggregateID, before, msg)
	return tag.RowsAffected(), err
}

// sqlRedispatchRows sets the given rows back to pending when they are
// still the dispatches that were looked at (dispatched before the cut-off).
const sqlRedispatchRows = `
UPDATE outbox_events
SET status = 'pending', next_attempt_at = now(), last_error = $3, last_error_class = NULL
WHERE id = ANY($1::uuid[]) AND status = 'dispatched' AND dispatched_at < $2`

// RedispatchRows sets those of the rows ids that are still dispatched
// before the cut-off back to pending, with msg as their last_error, and
// returns how many.
func RedispatchRows(ctx context.Context, db Execer, ids []string, before time.Time, msg string) (int64, error) {
	tag, err := db.Exec(ctx, sqlRedispatchRows, ids, before, msg)
	return tag.RowsAffected(), err
}

func scanAggregateKey(r pgx.CollectableRow) (AggregateKey, error) {
	var k AggregateKey
	return k, r.Scan(&k.Type, &k.ID)
}

// decodeHeaders reads the headers column. The schema's check makes it NULL
// or an object of strings; a row written around the check is read as well
// as it can be rather than blocking its aggregate: a value that is not a
// string keeps its JSON text, and anything but an object reads as none.
func decodeHeaders(raw []byte) map[string]string {
	var obj map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &obj) != nil || len(obj) == 0 {
		return nil
	}
	out := make(map[string]string, len(obj))
	for k, v := range obj {
		s := string(v)
		if len(v) > 0 && v[0] == '"' {
			_ = json.Unmarshal(v, &s) // a valid JSON string: jsonb wrote it
		}
		out[k] = s
	}
	return out
}
