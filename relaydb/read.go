package relaydb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file holds the reads of outbox_events that operator commands,
// effect activities and metrics need, each statement named with the reason
// for its shape (the table's indexes are the schema's).

// Queryer is what the reads need: a *pgxpool.Pool, a pgx.Tx or a *pgx.Conn.
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrEventNotFound: no outbox row has the event id (or the id is not a
// UUID). Not retryable: the id will not appear later.
var ErrEventNotFound = errors.New("event not in outbox_events")

// sqlUndelivered is a subquery of the rows not yet delivered: pending,
// delayed (pending rows whose deliver_after is still ahead: not late, only
// waiting), dispatched and quarantined (published and skipped rows are
// delivered or given up). It yields aggregate_type, status and due, when
// the row became deliverable (created_at, or deliver_after when later),
// each status read through its own partial index (0001, 0002, 0006), so its
// cost follows the rows in flight, not the table, which holds every
// delivered row for the retention period.
const sqlUndelivered = `
SELECT aggregate_type, CASE WHEN deliver_after > now() THEN 'delayed' ELSE status END AS status,
       greatest(created_at, deliver_after) AS due
FROM outbox_events WHERE status = 'pending'
UNION ALL
SELECT aggregate_type, status, greatest(created_at, deliver_after) FROM outbox_events WHERE status = 'dispatched'
UNION ALL
SELECT aggregate_type, status, greatest(created_at, deliver_after) FROM outbox_events WHERE status = 'quarantined'`

// sqlBacklog groups the small undelivered part of the table through its
// partial indexes; delivered rows, the bulk, are never read. Ages count
// from due, so a delayed event is not late before its time; a delayed
// group has no age, only the time until its first row is due.
const sqlBacklog = `
SELECT aggregate_type, status, count(*),
       CASE WHEN status = 'delayed' THEN 0 ELSE coalesce(extract(epoch FROM now() - min(due)), 0) END,
       CASE WHEN status = 'delayed' THEN extract(epoch FROM min(due) - now()) ELSE 0 END
FROM (` + sqlUndelivered + `) u
GROUP BY aggregate_type, status ORDER BY aggregate_type, status`

// Backlog is the undelivered rows of one aggregate type in one status.
type Backlog struct {
	AggregateType string
	// Status is pending, delayed, dispatched or quarantined. Delayed rows
	// are pending rows waiting for their deliver_after (their own, or the
	// one an earlier version of their aggregate waits for): the claim does
	// not take them before, and they are not counted as pending.
	Status string
	Count  int64
	// OldestAge is how long the oldest row has been deliverable: since its
	// created_at, or its deliver_after when later. Zero for delayed rows.
	OldestAge time.Duration
	// NextDue, for delayed rows only, is how long until the first of them
	// becomes deliverable.
	NextDue time.Duration
}

// ReadBacklog counts the rows not yet delivered (pending, delayed,
// dispatched, quarantined; skipped rows were given up on purpose and are
// not a backlog) by aggregate type and status, ordered by both. It reads
// only through the statuses' partial indexes, so it is cheap enough for
// every scrape.
func ReadBacklog(ctx context.Context, db Queryer) ([]Backlog, error) {
	rows, err := db.Query(ctx, sqlBacklog)
	if err != nil {
		return nil, fmt.Errorf("read outbox backlog: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Backlog, error) {
		var b Backlog
		var age, due float64
		err := r.Scan(&b.AggregateType, &b.Status, &b.Count, &age, &due)
		b.OldestAge = time.Duration(age * float64(time.Second))
		b.NextDue = time.Duration(due * float64(time.Second))
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox backlog: %w", err)
	}
	return out, nil
}

// sqlTableBytes: the heap, its indexes and TOAST, which is what retention
// keeps bounded.
const sqlTableBytes = `SELECT pg_total_relation_size('outbox_events')`

// TableBytes is the size of outbox_events with its indexes and TOAST.
func TableBytes(ctx context.Context, db Queryer) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, sqlTableBytes).Scan(&n); err != nil {
		return 0, fmt.Errorf("read outbox table size: %w", err)
	}
	return n, nil
}

// sqlTableStats reads what PostgreSQL's cumulative statistics keep about
// outbox_events: row versions counted live and dead (n_live_tup and
// n_dead_tup, estimates maintained as transactions commit and reset by
// vacuum and analyze; no scan). A dead version is left by every update and
// delete until vacuum removes it, and every index keeps an entry for it until
// then: a hot outbox whose vacuum is held back (a long transaction, an
// abandoned replication slot) makes the claim's index scan walk them.
const sqlTableStats = `
SELECT coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0)
FROM pg_stat_user_tables WHERE relid = 'outbox_events'::regclass`

// sqlIndexSizes: each index of outbox_events with its size on disk (a
// stat() of its files, no scan).
const sqlIndexSizes = `
SELECT c.relname, pg_relation_size(i.indexrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = 'outbox_events'::regclass
ORDER BY c.relname`

// TableHealth is what PostgreSQL's statistics say of outbox_events.
type TableHealth struct {
	// LiveRows and DeadRows are the statistics' estimates of live and dead
	// row versions.
	LiveRows, DeadRows int64
	// IndexBytes is the size of each index, by name.
	IndexBytes map[string]int64
}

// ReadTableHealth reads outbox_events' row statistics and index sizes. It
// reads catalogs and statistics only, never the table: cheap enough for
// every scrape.
func ReadTableHealth(ctx context.Context, db Queryer) (TableHealth, error) {
	var h TableHealth
	if err := db.QueryRow(ctx, sqlTableStats).Scan(&h.LiveRows, &h.DeadRows); err != nil {
		return h, fmt.Errorf("read outbox table statistics: %w", err)
	}
	rows, err := db.Query(ctx, sqlIndexSizes)
	if err != nil {
		return h, fmt.Errorf("read outbox index sizes: %w", err)
	}
	h.IndexBytes = map[string]int64{}
	var name string
	var size int64
	_, err = pgx.ForEachRow(rows, []any{&name, &size}, func() error {
		h.IndexBytes[name] = size
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("read outbox index sizes: %w", err)
	}
	return h, nil
}

// sqlRetentionRecord reads the retention record (ferry_maintenance,
// migration 0013) by its primary key.
const sqlRetentionRecord = `
SELECT coalesce(succeeded_at, since), succeeded_at IS NOT NULL, overdue_rows
FROM ferry_maintenance WHERE job = 'retention'`

// RetentionRecord is what the retention runs last recorded.
type RetentionRecord struct {
	// LastSuccess is when a run last finished; until one has, when the
	// record began (the schema's migration 0013). Succeeded tells which.
	LastSuccess time.Time
	Succeeded   bool
	// Overdue is the number of delivered rows past retention the last run
	// counted at its start (0 once a run finished); nil until a run counted.
	Overdue *int64
}

// ReadRetention reads the retention record: one primary-key lookup.
func ReadRetention(ctx context.Context, db Queryer) (RetentionRecord, error) {
	var r RetentionRecord
	err := db.QueryRow(ctx, sqlRetentionRecord).Scan(&r.LastSuccess, &r.Succeeded, &r.Overdue)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, errors.New("read the retention record: ferry_maintenance has no 'retention' row (run `ferry migrate`)")
	}
	if err != nil {
		return r, fmt.Errorf("read the retention record: %w", err)
	}
	return r, nil
}

// sqlPublishedRecently reads recent publications; published rows are the
// bulk of the table and have no index on published_at, so this is for a
// person's command, not for a scraper (metrics count publications instead).
const sqlPublishedRecently = `
SELECT count(*) FILTER (WHERE published_at > now() - interval '1 minute'),
       count(*)
FROM outbox_events WHERE status = 'published' AND published_at > now() - interval '1 hour'`

// PublishedRecently counts the rows published in the last minute and in
// the last hour. It scans the published rows: use it in commands, not in
// anything that runs often.
func PublishedRecently(ctx context.Context, db Queryer) (lastMinute, lastHour int64, err error) {
	if err := db.QueryRow(ctx, sqlPublishedRecently).Scan(&lastMinute, &lastHour); err != nil {
		return 0, 0, fmt.Errorf("read throughput: %w", err)
	}
	return lastMinute, lastHour, nil
}

// Row is an outbox row as operator commands show it. Payload and LastError
// may hold personal data: print them only through a redactor.
type Row struct {
	ID            string
	AggregateType string
	AggregateID   string
	Version       int64
	EventType     string
	Status        string
	// LastError is empty when the row has none.
	LastError string
	// LastErrorClass is LastError's class (migration 0011); empty when it
	// has none.
	LastErrorClass string
	CreatedAt      time.Time
	// Payload is the JSON text ("null" once retention blanked it).
	Payload *string
}

// sqlQuarantined reads quarantined rows, oldest first, through their
// partial index (0002); $1 NULL reads all.
const sqlQuarantined = `
SELECT id::text, aggregate_type, aggregate_id, aggregate_version, event_type, status, coalesce(last_error, ''),
       coalesce(last_error_class, ''), created_at, payload::text
FROM outbox_events WHERE status = 'quarantined'
ORDER BY created_at
LIMIT $1`

// Quarantined reads quarantined rows, oldest first, at most limit of them
// (0: all).
func Quarantined(ctx context.Context, db Queryer, limit int) ([]Row, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	return queryRows(ctx, db, "read quarantined rows", sqlQuarantined, lim)
}

// queryRows runs a query whose columns scanRow reads; what names it in the
// error.
func queryRows(ctx context.Context, db Queryer, what, sql string, args ...any) ([]Row, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, scanRow)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// sqlRowsByID reads rows by primary key.
const sqlRowsByID = `
SELECT id::text, aggregate_type, aggregate_id, aggregate_version, event_type, status, coalesce(last_error, ''),
       coalesce(last_error_class, ''), created_at, payload::text
FROM outbox_events WHERE id = ANY($1::uuid[])`

// RowsByID reads the rows of the given event ids, keyed by the id in lower
// case (PostgreSQL's text form of a UUID); ids without a row are missing
// from the map. Every id must be a UUID.
func RowsByID(ctx context.Context, db Queryer, ids []string) (map[string]Row, error) {
	list, err := queryRows(ctx, db, "load events", sqlRowsByID, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Row, len(list))
	for _, r := range list {
		out[r.ID] = r
	}
	return out, nil
}

// RowByID reads one row; ErrEventNotFound when there is none.
func RowByID(ctx context.Context, db Queryer, id string) (Row, error) {
	rows, err := RowsByID(ctx, db, []string{id})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "22P02" {
		return Row{}, fmt.Errorf("%w: %s", ErrEventNotFound, id)
	}
	if err != nil {
		return Row{}, err
	}
	for _, r := range rows {
		return r, nil
	}
	return Row{}, fmt.Errorf("%w: %s", ErrEventNotFound, id)
}

func scanRow(r pgx.CollectableRow) (Row, error) {
	var o Row
	err := r.Scan(&o.ID, &o.AggregateType, &o.AggregateID, &o.Version, &o.EventType, &o.Status, &o.LastError, &o.LastErrorClass, &o.CreatedAt, &o.Payload)
	return o, err
}

// sqlPublishedIDs reads a version range of one aggregate through the
// unique (aggregate_type, aggregate_id, aggregate_version) index.
const sqlPublishedIDs = `
SELECT id::text FROM outbox_events
WHERE aggregate_type = $1 AND aggregate_id = $2 AND aggregate_version BETWEEN $3 AND $4 AND status = 'published'
ORDER BY aggregate_version`

// PublishedIDs lists the ids of an aggregate's published events with
// versions from..to, in version order (what a replay re-publishes).
func PublishedIDs(ctx context.Context, db Queryer, aggregateType, aggregateID string, from, to int64) ([]string, error) {
	rows, err := db.Query(ctx, sqlPublishedIDs, aggregateType, aggregateID, from, to)
	if err != nil {
		return nil, fmt.Errorf("select published events: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("select published events: %w", err)
	}
	return ids, nil
}

// sqlPayload reads one payload by primary key.
const sqlPayload = `SELECT payload FROM outbox_events WHERE id = $1`

// Payload reads an event's JSON payload: ErrEventNotFound when no row has
// the id or the id is not a UUID. A payload blanked by retention is the
// JSON null.
func Payload(ctx context.Context, db Queryer, id string) ([]byte, error) {
	var raw []byte
	err := db.QueryRow(ctx, sqlPayload, id).Scan(&raw)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && pgErr.Code == "22P02":
		return nil, fmt.Errorf("%w: %s", ErrEventNotFound, id)
	case err != nil:
		return nil, fmt.Errorf("load event %s: %w", id, err)
	}
	return raw, nil
}

// Detail is an outbox row in full, with its aggregate's cursor: what `ferry
// event` shows of one event. Payload, LastError and Headers may hold
// personal data: print them only through a redactor.
type Detail struct {
	ID, AggregateType, AggregateID, EventType string
	Version                                   int64
	SchemaVersion                             int32
	Status                                    string
	// Attempts are the tries so far: claims (counted at claim time), and
	// in the publish-first lane direct publishes (counted by their mark).
	Attempts int32
	// NextAttemptAt is when a pending row becomes claimable.
	NextAttemptAt time.Time
	// ClaimedBy is the poller that claimed the row last; empty before.
	ClaimedBy string
	// LastError and LastErrorClass are empty when the row has none.
	LastError, LastErrorClass string
	// Headers are the producer's; nil when the row has none.
	Headers map[string]string
	// DeliverAfter, DispatchedAt and PublishedAt are nil when unset.
	DeliverAfter, DispatchedAt, PublishedAt *time.Time
	CreatedAt                               time.Time
	// TraceParent is empty when the row has none.
	TraceParent string
	// Payload is the JSON text as jsonb stores it (what a repair's digest
	// is of); "null" once retention blanked it.
	Payload string
	// Delivered is the aggregate's delivered_version: every version up to
	// it is published or skipped. LastVersion is the highest version
	// written.
	Delivered, LastVersion int64
}

// sqlDetail reads one row and its aggregate's counter row; the WHERE
// clause that follows it picks the row by primary key or by the unique
// (aggregate_type, aggregate_id, aggregate_version) index.
const sqlDetail = `
SELECT e.id::text, e.aggregate_type, e.aggregate_id, e.event_type, e.aggregate_version, e.schema_version, e.status,
       e.attempts, e.next_attempt_at, coalesce(e.claimed_by, ''), coalesce(e.last_error, ''), coalesce(e.last_error_class, ''),
       e.headers::text, e.deliver_after, e.dispatched_at, e.published_at, e.created_at, coalesce(e.trace_parent, ''),
       e.payload::text, coalesce(a.delivered_version, 0), coalesce(a.last_version, 0)
FROM outbox_events e
LEFT JOIN outbox_aggregates a ON a.aggregate_type = e.aggregate_type AND a.aggregate_id = e.aggregate_id`

const (
	sqlDetailByID      = sqlDetail + ` WHERE e.id = $1`
	sqlDetailByVersion = sqlDetail + ` WHERE e.aggregate_type = $1 AND e.aggregate_id = $2 AND e.aggregate_version = $3`
)

// DetailByID reads the row of event id in full: ErrEventNotFound when no
// row has the id or the id is not a UUID.
func DetailByID(ctx context.Context, db Queryer, id string) (Detail, error) {
	d, err := scanDetail(db.QueryRow(ctx, sqlDetailByID, id))
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && pgErr.Code == "22P02":
		return d, fmt.Errorf("%w: %s", ErrEventNotFound, id)
	case err != nil:
		return d, fmt.Errorf("load event %s: %w", id, err)
	}
	return d, nil
}

// DetailByVersion reads the row of one version of an aggregate in full:
// ErrEventNotFound when there is none.
func DetailByVersion(ctx context.Context, db Queryer, aggregateType, aggregateID string, version int64) (Detail, error) {
	d, err := scanDetail(db.QueryRow(ctx, sqlDetailByVersion, aggregateType, aggregateID, version))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return d, fmt.Errorf("%w: %s/%s v%d", ErrEventNotFound, aggregateType, aggregateID, version)
	case err != nil:
		return d, fmt.Errorf("load event %s/%s v%d: %w", aggregateType, aggregateID, version, err)
	}
	return d, nil
}

func scanDetail(r pgx.Row) (Detail, error) {
	var d Detail
	err := r.Scan(&d.ID, &d.AggregateType, &d.AggregateID, &d.EventType, &d.Version, &d.SchemaVersion, &d.Status,
		&d.Attempts, &d.NextAttemptAt, &d.ClaimedBy, &d.LastError, &d.LastErrorClass,
		headersScanner{&d.Headers}, &d.DeliverAfter, &d.DispatchedAt, &d.PublishedAt, &d.CreatedAt, &d.TraceParent,
		&d.Payload, &d.Delivered, &d.LastVersion)
	return d, err
}
