package relaydb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of aggregate ownership (migration 0010, table
// outbox_owners) that the workflow side runs: the publish-first lane hands
// an aggregate to its workflow under an epoch, and the run's activities
// mark, quarantine and hand back rows only while the aggregate is still
// theirs under that epoch (a fencing token). The lane's own claims and
// marks are the poller's (package poller).
//
// A fenced statement locks the owner row FOR SHARE for the rest of its
// transaction: an ownership change (a release, the reconciler taking the
// aggregate back, a new handoff) updates or deletes that row, so it waits
// for the fenced write, and a fenced write that comes after it finds the
// new epoch and changes nothing.

// Owners of an aggregate (outbox_owners.owner).
const (
	OwnerRelay    = "relay"
	OwnerWorkflow = "workflow"
)

// Owner is an aggregate's row in outbox_owners.
type Owner struct {
	Owner string
	Epoch int64
	// Holder and LeaseUntil: a relay's name and lease (OwnerRelay).
	Holder     string
	LeaseUntil time.Time
	// Cause: why the workflow owns it (OwnerWorkflow).
	Cause         string
	HandedVersion int64
	HandedAt      time.Time
	Since         time.Time
}

func (o Owner) String() string {
	if o.Owner == "" {
		return "none (the lane's)"
	}
	return fmt.Sprintf("%s epoch %d", o.Owner, o.Epoch)
}

// sqlOwnerOf reads an aggregate's owner row by its primary key.
const sqlOwnerOf = `
SELECT owner, epoch, coalesce(holder, ''), coalesce(lease_until, 'epoch'::timestamptz), coalesce(cause, ''),
       handed_version, coalesce(handed_at, 'epoch'::timestamptz), since
FROM outbox_owners WHERE aggregate_type = $1 AND aggregate_id = $2`

// OwnerOf reads who owns the aggregate; found is false when nobody does
// (it is the publish-first lane's, and free).
func OwnerOf(ctx context.Context, db Queryer, aggregateType, aggregateID string) (o Owner, found bool, err error) {
	err = db.QueryRow(ctx, sqlOwnerOf, aggregateType, aggregateID).Scan(&o.Owner, &o.Epoch, &o.Holder, &o.LeaseUntil,
		&o.Cause, &o.HandedVersion, &o.HandedAt, &o.Since)
	if errors.Is(err, pgx.ErrNoRows) {
		return Owner{}, false, nil
	}
	return o, err == nil, err
}

// sqlFence is the CTE every fenced statement starts with: the owner row of
// the run's aggregate under the run's epoch ($2, $3, $4), locked FOR SHARE.
const sqlFence = `
WITH own AS (
    SELECT 1 FROM outbox_owners
    WHERE aggregate_type = $2 AND aggregate_id = $3 AND owner = 'workflow' AND epoch = $4
    FOR SHARE
)`

// sqlMarkPublishedFenced is sqlMarkPublished under the run's epoch; the
// row records the epoch it was published under.
const sqlMarkPublishedFenced = sqlFence + `, ev AS (
    UPDATE outbox_events
    SET status = 'published', published_at = now(), last_error = NULL, last_error_class = NULL, owner_epoch = $4
    WHERE id = $1 AND aggregate_type = $2 AND aggregate_id = $3 AND EXISTS (SELECT 1 FROM own)` + sqlAdvanceCursor

// MarkPublishedFenced is MarkPublished for a run that owns the aggregate
// under epoch: it marks the event only while the aggregate is still the
// run's under that epoch, and reports false, changing nothing, when it is
// not.
func MarkPublishedFenced(ctx context.Context, db Execer, id, aggregateType, aggregateID string, epoch int64) (bool, error) {
	tag, err := db.Exec(ctx, sqlMarkPublishedFenced, id, aggregateType, aggregateID, epoch)
	return tag.RowsAffected() > 0, err
}

// sqlMarkBatchPublishedFenced is sqlMarkBatchPublished under the run's
// epoch.
const sqlMarkBatchPublishedFenced = sqlFence + `, ev AS (
    UPDATE outbox_events
    SET status = 'published', published_at = now(), last_error = NULL, last_error_class = NULL, owner_epoch = $4
    WHERE id = ANY($1::uuid[]) AND aggregate_type = $2 AND aggregate_id = $3 AND EXISTS (SELECT 1 FROM own)
    RETURNING aggregate_version
)
UPDATE outbox_aggregates a
SET delivered_version = GREATEST(a.delivered_version, (SELECT max(aggregate_version) FROM ev)), updated_at = now()
WHERE a.aggregate_type = $2 AND a.aggregate_id = $3 AND EXISTS (SELECT 1 FROM ev)`

// MarkBatchPublishedFenced is MarkBatchPublished for a run that owns the
// aggregate under epoch; false: refused, nothing changed.
func MarkBatchPublishedFenced(ctx context.Context, db Execer, ids []string, aggregateType, aggregateID string, epoch int64) (bool, error) {
	tag, err := db.Exec(ctx, sqlMarkBatchPublishedFenced, ids, aggregateType, aggregateID, epoch)
	return tag.RowsAffected() > 0, err
}

// sqlOwned checks that the aggregate is the workflow's under an epoch.
const sqlOwned = `
SELECT EXISTS (SELECT 1 FROM outbox_owners
               WHERE aggregate_type = $1 AND aggregate_id = $2 AND owner = 'workflow' AND epoch = $3)`

// Owned says whether the aggregate is owned by the workflow under epoch,
// as a run checks before it publishes. It only reads: a mark is what the
// fence guards.
func Owned(ctx context.Context, db Queryer, aggregateType, aggregateID string, epoch int64) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, sqlOwned, aggregateType, aggregateID, epoch).Scan(&ok)
	return ok, err
}

// sqlQuarantineFenced is sqlQuarantine under the run's epoch.
const sqlQuarantineFenced = sqlFence + `
UPDATE outbox_events SET status = 'quarantined', last_error = $5, last_error_class = $6
WHERE id = $1 AND aggregate_type = $2 AND aggregate_id = $3 AND status <> 'published' AND EXISTS (SELECT 1 FROM own)`

// QuarantineFenced is Quarantine for a run that owns the aggregate under
// epoch; false: refused (or the row is published), nothing changed.
func QuarantineFenced(ctx context.Context, db Execer, id, aggregateType, aggregateID string, epoch int64, class, msg string) (bool, error) {
	tag, err := db.Exec(ctx, sqlQuarantineFenced, id, aggregateType, aggregateID, epoch, msg, class)
	return tag.RowsAffected() > 0, err
}

// sqlHoldFenced is sqlHold under the run's epoch; it answers whether the
// aggregate is still the run's (a hold that finds no row to change is no
// refusal).
const sqlHoldFenced = sqlFence + `, held AS (
    UPDATE outbox_events
    SET status = 'pending', next_attempt_at = now() + $5::interval, last_error = $6, last_error_class = NULL
    WHERE id = ANY($1::uuid[]) AND aggregate_type = $2 AND aggregate_id = $3
      AND status IN ('pending', 'dispatched') AND EXISTS (SELECT 1 FROM own)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM own)`

// HoldFenced is Hold for a run that owns the aggregate under epoch; false:
// refused, nothing changed.
func HoldFenced(ctx context.Context, db Queryer, ids []string, aggregateType, aggregateID string, epoch int64, interval time.Duration, msg string) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, sqlHoldFenced, ids, aggregateType, aggregateID, epoch, interval, msg).Scan(&ok)
	return ok, err
}

// sqlLockOwner locks the owner row of a run's aggregate under its epoch
// FOR SHARE, for a transaction that changes the aggregate's rows (a
// repair): an ownership change waits for it.
const sqlLockOwner = `
SELECT true FROM outbox_owners
WHERE aggregate_type = $1 AND aggregate_id = $2 AND owner = 'workflow' AND epoch = $3
FOR SHARE`

// LockOwner locks the aggregate's owner row for the rest of tx when the
// workflow owns it under epoch, and reports whether it does.
func LockOwner(ctx context.Context, tx Queryer, aggregateType, aggregateID string, epoch int64) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, sqlLockOwner, aggregateType, aggregateID, epoch).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return ok, err
}

// sqlFleetLane reads the lane of the relay seen last (ferry_relays,
// poller's registry): the lane the outbox's fleet runs.
const sqlFleetLane = `SELECT lane FROM ferry_relays ORDER BY seen_at DESC LIMIT 1`

// FleetLane is the lane the outbox's relays run ("workflow",
// "publish-first"), read off the relays' registry; "" when no relay
// registered.
func FleetLane(ctx context.Context, db Queryer) (string, error) {
	var lane string
	err := db.QueryRow(ctx, sqlFleetLane).Scan(&lane)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return lane, err
}

// sqlRelease gives the aggregate back to the lane: the run's owner row is
// deleted when it is still the run's under its epoch and the cursor has
// reached every version relays handed to the run. A version a relay
// handed after the run looked (a dispatch claim raises handed_version
// while it holds the owner row's lock) keeps the row, and the run waits
// for that version's signal. Versions committed but not yet handed are the
// lane's once the row is gone. The second statement of the pair reads why
// nothing was deleted.
const (
	sqlRelease = `
DELETE FROM outbox_owners o
USING outbox_aggregates a
WHERE o.aggregate_type = $1 AND o.aggregate_id = $2 AND o.owner = 'workflow' AND o.epoch = $3
  AND a.aggregate_type = o.aggregate_type AND a.aggregate_id = o.aggregate_id
  AND o.handed_version <= a.delivered_version
RETURNING a.delivered_version`

	sqlReleaseRefused = `
SELECT coalesce(o.owner, ''), coalesce(o.epoch, 0), coalesce(o.handed_version, 0), coalesce(a.delivered_version, 0)
FROM (SELECT $1::text AS t, $2::text AS i) k
LEFT JOIN outbox_owners o ON o.aggregate_type = k.t AND o.aggregate_id = k.i
LEFT JOIN outbox_aggregates a ON a.aggregate_type = k.t AND a.aggregate_id = k.i`
)

// ReleaseOutcome is what Release did.
type ReleaseOutcome struct {
	// Released: the owner row is gone; the aggregate is the lane's.
	Released bool
	// Busy: still the run's, but relays handed it versions above the
	// cursor (HandedVersion > Delivered).
	Busy bool
	// Lost: not the run's under its epoch (Owner says whose).
	Lost                     bool
	Owner                    Owner
	Delivered, HandedVersion int64
}

// Release gives the aggregate a run owns under epoch back to the lane,
// unless relays handed it versions it has not delivered (Busy) or it is
// not the run's any more (Lost).
func Release(ctx context.Context, db Queryer, aggregateType, aggregateID string, epoch int64) (ReleaseOutcome, error) {
	var out ReleaseOutcome
	err := db.QueryRow(ctx, sqlRelease, aggregateType, aggregateID, epoch).Scan(&out.Delivered)
	if err == nil {
		out.Released = true
		return out, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return out, err
	}
	if err := db.QueryRow(ctx, sqlReleaseRefused, aggregateType, aggregateID).Scan(
		&out.Owner.Owner, &out.Owner.Epoch, &out.HandedVersion, &out.Delivered); err != nil {
		return out, err
	}
	if out.Owner.Owner == OwnerWorkflow && out.Owner.Epoch == epoch {
		out.Busy = true
	} else {
		out.Lost = true
	}
	return out, nil
}

// sqlHandToWorkflow makes an aggregate its workflow's under a new epoch,
// for an operator's repair of an event no run holds: unless a run owns it
// already, in which case its epoch stays. A relay's lease is taken over:
// the relay's marks are then refused. It returns the epoch.
const sqlHandToWorkflow = `
INSERT INTO outbox_owners AS o (aggregate_type, aggregate_id, owner, epoch, cause, handed_at)
VALUES ($1, $2, 'workflow', nextval('ferry_owner_epoch'), $3, now())
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE
    SET owner = 'workflow', epoch = CASE WHEN o.owner = 'workflow' THEN o.epoch ELSE EXCLUDED.epoch END,
        holder = NULL, lease_until = NULL,
        cause = CASE WHEN o.owner = 'workflow' THEN o.cause ELSE EXCLUDED.cause END,
        handed_at = now(),
        since = CASE WHEN o.owner = 'workflow' THEN o.since ELSE now() END
RETURNING epoch`

// HandToWorkflow makes the aggregate its workflow's (cause says why) and
// returns the epoch it is owned under. Call it in the transaction of the
// change that needs the workflow (a repair), so both happen or neither.
func HandToWorkflow(ctx context.Context, tx Queryer, aggregateType, aggregateID, cause string) (int64, error) {
	var epoch int64
	err := tx.QueryRow(ctx, sqlHandToWorkflow, aggregateType, aggregateID, cause).Scan(&epoch)
	return epoch, err
}

// WorkflowOwned is one aggregate a workflow owns, as the reconciler sees
// it.
type WorkflowOwned struct {
	AggregateKey
	Epoch    int64
	Cause    string
	HandedAt time.Time
	Since    time.Time
}

// sqlWorkflowOwned lists aggregates workflows have owned longer than $1,
// oldest first.
const sqlWorkflowOwned = `
SELECT aggregate_type, aggregate_id, epoch, coalesce(cause, ''), coalesce(handed_at, since), since FROM outbox_owners
WHERE owner = 'workflow' AND since < now() - $1::interval
ORDER BY since
LIMIT $2`

// WorkflowOwnedSince lists at most limit aggregates that workflows have
// owned for longer than age, the longest first.
func WorkflowOwnedSince(ctx context.Context, db Queryer, age time.Duration, limit int) ([]WorkflowOwned, error) {
	rows, err := db.Query(ctx, sqlWorkflowOwned, age, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (WorkflowOwned, error) {
		var w WorkflowOwned
		return w, r.Scan(&w.Type, &w.ID, &w.Epoch, &w.Cause, &w.HandedAt, &w.Since)
	})
}

// sqlTakeBack takes an aggregate back from a workflow whose run ended
// without releasing it: the owner row goes, under the epoch the reconciler
// looked at and only when no relay handed the workflow anything within
// $4 (a dispatch in flight may be starting a new run), and the rows
// dispatched to it go back to pending for the lane. Quarantined rows stay
// quarantined: the lane waits at them until an operator repairs them.
const sqlTakeBack = `
WITH gone AS (
    DELETE FROM outbox_owners
    WHERE aggregate_type = $1 AND aggregate_id = $2 AND owner = 'workflow' AND epoch = $3
      AND coalesce(handed_at, since) < now() - $4::interval
    RETURNING aggregate_type, aggregate_id
), requeued AS (
    UPDATE outbox_events e
    SET status = 'pending', next_attempt_at = now(), last_error = $5, last_error_class = NULL
    FROM gone g, outbox_aggregates a
    WHERE e.aggregate_type = g.aggregate_type AND e.aggregate_id = g.aggregate_id
      AND a.aggregate_type = g.aggregate_type AND a.aggregate_id = g.aggregate_id
      AND e.aggregate_version > a.delivered_version AND e.status = 'dispatched'
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM requeued)`

// TakeBack gives the aggregate back to the lane from a workflow that owns
// it under epoch and handed nothing within quiet, setting the rows
// dispatched to it pending again with msg as their last_error. It reports
// whether it took the aggregate back and how many rows it re-queued.
func TakeBack(ctx context.Context, db Queryer, aggregateType, aggregateID string, epoch int64, quiet time.Duration, msg string) (bool, int64, error) {
	var gone, requeued int64
	err := db.QueryRow(ctx, sqlTakeBack, aggregateType, aggregateID, epoch, quiet, msg).Scan(&gone, &requeued)
	return gone > 0, requeued, err
}

// sqlLaneCounts counts the owner rows by owner, for `ferry status` and the
// metrics (the table holds only aggregates owned right now: small).
const sqlLaneCounts = `
SELECT count(*) FILTER (WHERE owner = 'workflow'),
       count(*) FILTER (WHERE owner = 'relay' AND lease_until > now()),
       coalesce(extract(epoch FROM now() - min(since) FILTER (WHERE owner = 'workflow')), 0)
FROM outbox_owners`

// LaneCounts is who owns aggregates right now.
type LaneCounts struct {
	// Workflow: aggregates their workflows own (handed off); OldestWorkflow
	// is how long the longest-held one has been.
	Workflow       int64
	OldestWorkflow time.Duration
	// Relay: aggregates a relay is publishing directly (live leases).
	Relay int64
}

// ReadLaneCounts counts the aggregates owned by workflows and by relays.
func ReadLaneCounts(ctx context.Context, db Queryer) (LaneCounts, error) {
	var c LaneCounts
	var oldest float64
	if err := db.QueryRow(ctx, sqlLaneCounts).Scan(&c.Workflow, &c.Relay, &oldest); err != nil {
		return c, fmt.Errorf("read aggregate owners: %w", err)
	}
	c.OldestWorkflow = time.Duration(oldest * float64(time.Second))
	return c, nil
}

// Relay is one row of the relays' registry (ferry_relays).
type Relay struct {
	Name, Lane, Source string
	StartedAt          time.Time
	// Seen is how long ago the relay last refreshed its row.
	Seen time.Duration
}

// sqlRelays lists the registered relays, the most recently seen first.
const sqlRelays = `
SELECT name, lane, source, started_at, extract(epoch FROM now() - seen_at) FROM ferry_relays
ORDER BY seen_at DESC LIMIT 100`

// Relays lists the relays registered in ferry_relays (at most 100), the
// most recently seen first; a relay not seen for 30s is gone (poller's
// registry).
func Relays(ctx context.Context, db Queryer) ([]Relay, error) {
	rows, err := db.Query(ctx, sqlRelays)
	if err != nil {
		return nil, fmt.Errorf("read the relays' registry: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Relay, error) {
		var x Relay
		var seen float64
		err := r.Scan(&x.Name, &x.Lane, &x.Source, &x.StartedAt, &seen)
		x.Seen = time.Duration(seen * float64(time.Second))
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the relays' registry: %w", err)
	}
	return out, nil
}
