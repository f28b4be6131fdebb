package relaydb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The drift check's reads, and the statements its advice tells an
// operator to run: both are on this package's tables.

// sqlRecentAggregates picks the aggregates written to or delivered most
// recently. It reads outbox_aggregates (one narrow row per aggregate) with
// a top-N sort: an index on updated_at would turn every insert's and every
// publish's update of that row into a non-HOT update, for a query that
// runs every few minutes.
const sqlRecentAggregates = `
SELECT aggregate_type, aggregate_id FROM outbox_aggregates
ORDER BY updated_at DESC
LIMIT $1`

// RecentAggregates lists the n aggregates written to or delivered most
// recently.
func RecentAggregates(ctx context.Context, db Queryer, n int) ([]AggregateKey, error) {
	rows, err := db.Query(ctx, sqlRecentAggregates, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanAggregateKey)
}

// sqlDriftRows reads one aggregate's cursor and its rows not yet published
// near it, through the (aggregate_type, aggregate_id, aggregate_version)
// index: versions more than 1000 below the cursor are not looked at, so a
// long-lived aggregate costs no more than a young one.
const sqlDriftRows = `
SELECT a.delivered_version,
       coalesce((array_agg(e.aggregate_version ORDER BY e.aggregate_version)
           FILTER (WHERE e.status = 'dispatched' AND e.dispatched_at < now() - $3::interval))[1:100], '{}'),
       coalesce((array_agg(e.aggregate_version ORDER BY e.aggregate_version)
           FILTER (WHERE e.status = 'quarantined'))[1:100], '{}'),
       coalesce((array_agg(e.aggregate_version ORDER BY e.aggregate_version)
           FILTER (WHERE e.status IN ('pending', 'dispatched') AND e.aggregate_version <= a.delivered_version))[1:100], '{}')
FROM outbox_aggregates a
LEFT JOIN outbox_events e
  ON e.aggregate_type = a.aggregate_type AND e.aggregate_id = a.aggregate_id
 AND e.aggregate_version > a.delivered_version - 1000
 AND e.status IN ('pending', 'dispatched', 'quarantined')
WHERE a.aggregate_type = $1 AND a.aggregate_id = $2
GROUP BY a.delivered_version`

// DriftRows is what the outbox tables say about one aggregate; each list
// holds at most 100 versions, ascending, within 1000 below the cursor.
type DriftRows struct {
	Delivered   int64
	Dispatched  []int64 // dispatched longer than the grace ago
	Quarantined []int64
	Below       []int64 // pending or dispatched at or below Delivered
}

// ReadDriftRows reads the aggregate's cursor and its undelivered rows near
// it; found is false when the aggregate has no row.
func ReadDriftRows(ctx context.Context, db Queryer, aggregateType, aggregateID string, grace time.Duration) (t DriftRows, found bool, err error) {
	err = db.QueryRow(ctx, sqlDriftRows, aggregateType, aggregateID, grace).Scan(&t.Delivered, &t.Dispatched, &t.Quarantined, &t.Below)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, false, nil
	}
	return t, err == nil, err
}

// sqlStaleEpochs finds, among the aggregate's last 1000 published
// versions marked under an epoch (the publish-first lane), those marked
// under a lower epoch than an earlier version: epochs only grow with
// every ownership change, so a later version under an older epoch was
// marked by an owner that had lost the aggregate.
const sqlStaleEpochs = `
SELECT coalesce((array_agg(aggregate_version ORDER BY aggregate_version))[1:100], '{}') FROM (
    SELECT aggregate_version, owner_epoch,
           max(owner_epoch) OVER (ORDER BY aggregate_version ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS earlier
    FROM outbox_events
    WHERE aggregate_type = $1 AND aggregate_id = $2 AND aggregate_version > $3 - 1000
      AND status = 'published' AND owner_epoch IS NOT NULL
) v
WHERE owner_epoch < earlier`

// StaleEpochs lists (at most 100 of) the aggregate's versions within 1000
// below delivered that were marked under an older epoch than an earlier
// version.
func StaleEpochs(ctx context.Context, db Queryer, aggregateType, aggregateID string, delivered int64) ([]int64, error) {
	var vs []int64
	err := db.QueryRow(ctx, sqlStaleEpochs, aggregateType, aggregateID, delivered).Scan(&vs)
	return vs, err
}

// The statements below are advice: the drift check spells them out for an
// operator, with the aggregate's literals in place; nothing runs them.

// AdviceMarkPublished marks the aggregate's undelivered rows at or below
// upTo published.
func AdviceMarkPublished(aggregateType, aggregateID string, upTo int64) string {
	return fmt.Sprintf("UPDATE outbox_events SET status = 'published', published_at = now() WHERE %s AND aggregate_version <= %d AND status IN ('pending', 'dispatched')",
		whereAggregate(aggregateType, aggregateID), upTo)
}

// AdviceRequeue sets the aggregate's rows in status (quarantined or
// dispatched) back to pending.
func AdviceRequeue(aggregateType, aggregateID, status string) string {
	return fmt.Sprintf("UPDATE outbox_events SET status = 'pending', next_attempt_at = now() WHERE %s AND status = %s",
		whereAggregate(aggregateType, aggregateID), quote(status))
}

// AdviceSetDelivered sets the aggregate's delivered_version.
func AdviceSetDelivered(aggregateType, aggregateID string, v int64) string {
	return fmt.Sprintf("UPDATE outbox_aggregates SET delivered_version = %d WHERE %s", v, whereAggregate(aggregateType, aggregateID))
}

func whereAggregate(aggregateType, aggregateID string) string {
	return fmt.Sprintf("aggregate_type = %s AND aggregate_id = %s", quote(aggregateType), quote(aggregateID))
}

// quote quotes s as an SQL string literal, for the statements the advice
// spells out.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// AdviceShowEpochs lists the aggregate's published rows with the epoch
// each was marked under.
func AdviceShowEpochs(aggregateType, aggregateID string) string {
	return "SELECT aggregate_version, owner_epoch, published_at FROM outbox_events WHERE " +
		whereAggregate(aggregateType, aggregateID) + " AND status = 'published' ORDER BY aggregate_version DESC LIMIT 50"
}
