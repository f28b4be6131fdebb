package repairdb

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Queryer is what the reads and the locks need: a pgx.Tx (a repair locks
// its row for the rest of the transaction), a *pgxpool.Pool or a *pgx.Conn.
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Execer is what the changes need: a pgx.Tx, in the transaction that
// locked the row and writes its audit.
type Execer interface {
	Queryer
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// RepairTarget is the row a repair locked.
type RepairTarget struct {
	AggregateType, AggregateID string
	Version                    int64
	// Payload is the stored (jsonb text) form.
	Payload       string
	SchemaVersion int
	Status        string
	// Delivered is the aggregate's delivered_version (LockWithCursor only).
	Delivered int64
}

// sqlLockForRepair reads and locks the row, so the repair and its audit
// see the row they change.
const sqlLockForRepair = `
SELECT aggregate_type, aggregate_id, aggregate_version, payload::text, schema_version, status
FROM outbox_events WHERE id = $1 FOR UPDATE`

// LockForRepair reads and locks the row of event id for the rest of tx:
// pgx.ErrNoRows when there is none. Delivered stays 0.
func LockForRepair(ctx context.Context, tx Queryer, id string) (RepairTarget, error) {
	var r RepairTarget
	err := tx.QueryRow(ctx, sqlLockForRepair, id).Scan(&r.AggregateType, &r.AggregateID, &r.Version, &r.Payload, &r.SchemaVersion, &r.Status)
	return r, err
}

// sqlLockWithCursor reads a quarantined row and its aggregate's cursor, locking
// both, so a concurrent claim or publish of the aggregate waits for the
// repair.
const sqlLockWithCursor = `
SELECT e.aggregate_type, e.aggregate_id, e.aggregate_version, e.payload::text, e.schema_version, e.status,
       coalesce(a.delivered_version, 0)
FROM outbox_events e
LEFT JOIN outbox_aggregates a ON a.aggregate_type = e.aggregate_type AND a.aggregate_id = e.aggregate_id
WHERE e.id = $1
FOR UPDATE OF e`

// LockWithCursor reads and locks the row of event id with its aggregate's
// delivered_version (0 without a cursor row): pgx.ErrNoRows when there is
// none. For repairs of rows no workflow holds.
func LockWithCursor(ctx context.Context, tx Queryer, id string) (RepairTarget, error) {
	var r RepairTarget
	err := tx.QueryRow(ctx, sqlLockWithCursor, id).Scan(&r.AggregateType, &r.AggregateID, &r.Version, &r.Payload, &r.SchemaVersion, &r.Status, &r.Delivered)
	return r, err
}

// sqlSkip marks the event skipped and moves the aggregate's cursor past it
// in the same statement, as relaydb's MarkPublished does for a publish, so
// a later run of the workflow resumes after it; GREATEST keeps a cursor
// that is already further where it is.
const sqlSkip = `
WITH ev AS (
    UPDATE outbox_events SET status = 'skipped', last_error = NULL, last_error_class = NULL
    WHERE id = $1
    RETURNING aggregate_type, aggregate_id, aggregate_version
)
UPDATE outbox_aggregates a
SET delivered_version = GREATEST(a.delivered_version, ev.aggregate_version), updated_at = now()
FROM ev
WHERE a.aggregate_type = ev.aggregate_type AND a.aggregate_id = ev.aggregate_id`

// Skip marks the event skipped and moves its aggregate's cursor past it.
func Skip(ctx context.Context, tx Execer, id string) error {
	_, err := tx.Exec(ctx, sqlSkip, id)
	return err
}

// sqlRetry hands a quarantined row back to the workflow that holds it
// (dispatched: the workflow, not the poller, publishes it again).
const sqlRetry = `UPDATE outbox_events SET status = 'dispatched', last_error = NULL, last_error_class = NULL WHERE id = $1 AND status = 'quarantined'`

// Retry sets a quarantined row dispatched again, for the workflow that
// holds it.
func Retry(ctx context.Context, tx Execer, id string) error {
	_, err := tx.Exec(ctx, sqlRetry, id)
	return err
}

// sqlPatch replaces a held row's payload and schema version; the workflow
// that holds it publishes it next.
const sqlPatch = `
UPDATE outbox_events SET payload = $2::jsonb, schema_version = $3, status = 'dispatched', last_error = NULL, last_error_class = NULL
WHERE id = $1`

// Patch replaces the row's payload (JSON text) and schema version and sets
// it dispatched, for the workflow that holds it.
func Patch(ctx context.Context, tx Execer, id, payload string, schemaVersion int) error {
	_, err := tx.Exec(ctx, sqlPatch, id, payload, schemaVersion)
	return err
}

// sqlRequeue gives a quarantined row back to the poller with fresh
// attempts (retry, and patch with the new payload).
const sqlRequeue = `
UPDATE outbox_events
SET status = 'pending', attempts = 0, next_attempt_at = now(), last_error = NULL, last_error_class = NULL, payload = $2::jsonb, schema_version = $3
WHERE id = $1 AND status = 'quarantined'`

// Requeue sets a quarantined row pending with fresh attempts, payload
// (JSON text) and schemaVersion: the poller claims it again. For rows no
// workflow holds.
func Requeue(ctx context.Context, tx Execer, id, payload string, schemaVersion int) error {
	_, err := tx.Exec(ctx, sqlRequeue, id, payload, schemaVersion)
	return err
}

// sqlStoredPayload reads the payload back in jsonb's text form, which is
// what a repair's digest is of.
const sqlStoredPayload = `SELECT payload::text FROM outbox_events WHERE id = $1`

// StoredPayload reads the row's payload as jsonb stores it (its text form).
func StoredPayload(ctx context.Context, tx Queryer, id string) (string, error) {
	var p string
	err := tx.QueryRow(ctx, sqlStoredPayload, id).Scan(&p)
	return p, err
}

// sqlFindRepair reads an audit row through request_id's unique index.
const sqlFindRepair = `SELECT id FROM ferry_repairs WHERE request_id = $1`

// FindRepair is the audit id of the repair or replay with requestID:
// pgx.ErrNoRows when none was applied.
func FindRepair(ctx context.Context, db Queryer, requestID string) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, sqlFindRepair, requestID).Scan(&id)
	return id, err
}

// Audit is a row of ferry_repairs. The table's checks refuse an empty
// Actor or Reason (23514, check_violation) and an unknown Action.
type Audit struct {
	RequestID, Actor, Action, EventID string
	AggregateType, AggregateID        string
	Version                           int64
	Reason                            string
	// PayloadSHA256Before and PayloadSHA256After are hex SHA-256 digests
	// of the stored payload before and after; equal unless patched.
	PayloadSHA256Before, PayloadSHA256After string
	SchemaVersionBefore, SchemaVersionAfter int
}

func (a Audit) args() []any {
	return []any{a.RequestID, a.Actor, a.Action, a.EventID, a.AggregateType, a.AggregateID, a.Version,
		a.Reason, a.PayloadSHA256Before, a.PayloadSHA256After, a.SchemaVersionBefore, a.SchemaVersionAfter}
}

const sqlInsertRepairValues = `
INSERT INTO ferry_repairs (request_id, actor, action, event_id, aggregate_type, aggregate_id, aggregate_version,
                           reason, payload_sha256_before, payload_sha256_after, schema_version_before, schema_version_after)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

const sqlInsertRepair = sqlInsertRepairValues + ` RETURNING id`

// sqlInsertReplay: a replay's publish is at-least-once already; a retried
// attempt whose audit row exists must not fail on it.
const sqlInsertReplay = sqlInsertRepairValues + ` ON CONFLICT (request_id) DO NOTHING`

// InsertRepair writes the audit row of a repair and returns its id; a
// request id audited before fails on the unique index (look it up first,
// FindRepair, in the same transaction).
func InsertRepair(ctx context.Context, tx Queryer, a Audit) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, sqlInsertRepair, a.args()...).Scan(&id)
	return id, err
}

// InsertReplay writes the audit row of a replay; inserted is false when
// the request id was audited before.
func InsertReplay(ctx context.Context, tx Execer, a Audit) (inserted bool, err error) {
	tag, err := tx.Exec(ctx, sqlInsertReplay, a.args()...)
	return tag.RowsAffected() > 0, err
}

// AuditEntry is an audit row read back: the Audit with its id and time.
type AuditEntry struct {
	ID int64
	At time.Time
	Audit
}

// sqlAuditOf reads an event's audit rows, newest first, through
// ferry_repairs_event_idx (0002).
const sqlAuditOf = `
SELECT id, at, request_id, actor, action, event_id::text, aggregate_type, aggregate_id, aggregate_version, reason,
       payload_sha256_before, payload_sha256_after, schema_version_before, schema_version_after
FROM ferry_repairs WHERE event_id = $1
ORDER BY id DESC
LIMIT $2`

// AuditOf reads the audit rows of event id (a UUID), at most the latest
// limit of them, oldest first.
func AuditOf(ctx context.Context, db Queryer, id string, limit int) ([]AuditEntry, error) {
	rows, err := db.Query(ctx, sqlAuditOf, id, limit)
	if err != nil {
		return nil, fmt.Errorf("read the audit of event %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := r.Scan(&e.ID, &e.At, &e.RequestID, &e.Actor, &e.Action, &e.EventID, &e.AggregateType, &e.AggregateID, &e.Version,
			&e.Reason, &e.PayloadSHA256Before, &e.PayloadSHA256After, &e.SchemaVersionBefore, &e.SchemaVersionAfter)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit of event %s: %w", id, err)
	}
	slices.Reverse(out)
	return out, nil
}
