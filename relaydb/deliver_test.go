package relaydb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/relaydb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The delivery functions return the driver's errors so their callers can
// classify them: these are the contracts the activities rely on.
func TestDeliveryFunctionsKeepTheirContracts(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	insert := func(aggID string) string {
		var id string
		require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', $1, 'created', '{"n": 1}') RETURNING id::text`, aggID).Scan(&id))
		return id
	}
	e1, e2 := insert("o-1"), insert("o-1")

	_, err := relaydb.LoadForPublish(ctx, db.Pool, "00000000-0000-0000-0000-000000000000")
	require.ErrorIs(t, err, pgx.ErrNoRows)
	_, err = relaydb.LoadForPublish(ctx, db.Pool, "not-a-uuid")
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr) && pgErr.Code == "22P02", "%v", err)
	rows, err := relaydb.LoadManyForPublish(ctx, db.Pool, []string{e1, e2, "00000000-0000-0000-0000-000000000000"})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, int64(2), rows[e2].Version)
	require.JSONEq(t, `{"n": 1}`, string(rows[e1].Payload))

	v, err := relaydb.DeliveredVersion(ctx, db.Pool, "order", "nobody")
	require.NoError(t, err)
	require.Zero(t, v, "an aggregate without a row has delivered nothing")
	require.NoError(t, relaydb.MarkPublished(ctx, db.Pool, e2))
	require.NoError(t, relaydb.MarkPublished(ctx, db.Pool, e1), "a late mark of an earlier version")
	v, err = relaydb.DeliveredVersion(ctx, db.Pool, "order", "o-1")
	require.NoError(t, err)
	require.Equal(t, int64(2), v, "GREATEST: a late mark does not move the cursor back")

	e3 := insert("o-1")
	require.NoError(t, relaydb.Hold(ctx, db.Pool, []string{e3}, time.Hour, relaydb.HeldPrefix+"test"))
	var lastError *string
	var later bool
	read := func() {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT last_error, next_attempt_at > now() + interval '30 minutes' FROM outbox_events WHERE id = $1`, e3).Scan(&lastError, &later))
	}
	read()
	require.True(t, later)
	require.NotNil(t, lastError)
	require.NoError(t, relaydb.ReleaseHeld(ctx, db.Pool, "order", "o-1"))
	read()
	require.False(t, later)
	require.Nil(t, lastError)

	_, found, err := relaydb.ReadDriftRows(ctx, db.Pool, "order", "nobody", time.Minute)
	require.NoError(t, err)
	require.False(t, found)
	d, found, err := relaydb.ReadDriftRows(ctx, db.Pool, "order", "o-1", time.Minute)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, int64(2), d.Delivered)

}

// The reconciler's statements touch only the dispatches a pass looked at:
// a row dispatched after the pass's cut-off (re-dispatched meanwhile, to a
// run that holds it) stays dispatched, as do other statuses and other
// aggregates.
func TestRedispatchKeepsToTheCutOff(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	insert := func(aggID, status string, ago time.Duration) string {
		var id string
		require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, dispatched_at)
			VALUES ('order', $1, 'created', '{}', $2, now() - $3::interval) RETURNING id::text`, aggID, status, ago).Scan(&id))
		return id
	}
	old1, old2 := insert("o-1", "dispatched", time.Hour), insert("o-1", "dispatched", time.Hour)
	insert("o-1", "quarantined", time.Hour)
	other := insert("o-2", "dispatched", 2*time.Hour)

	keys, before, err := relaydb.StuckAggregates(ctx, db.Pool, 30*time.Minute)
	require.NoError(t, err)
	require.Equal(t, []relaydb.AggregateKey{{Type: "order", ID: "o-2"}, {Type: "order", ID: "o-1"}}, keys, "the longest stuck first")
	require.WithinDuration(t, time.Now().Add(-30*time.Minute), before, time.Minute)
	rows, err := relaydb.StuckRows(ctx, db.Pool, "order", "o-1", before)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, []int64{1, 2}, []int64{rows[0].Version, rows[1].Version})
	require.Equal(t, old1, rows[0].ID)

	// old2 is re-dispatched after the pass looked: its dispatched_at moves.
	_, err = db.Pool.Exec(ctx, `UPDATE outbox_events SET dispatched_at = now() WHERE id = $1`, old2)
	require.NoError(t, err)
	n, err := relaydb.RedispatchRows(ctx, db.Pool, []string{old1, old2}, before, "test")
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "old2 was re-dispatched since the pass looked")
	n, err = relaydb.RedispatchRows(ctx, db.Pool, []string{old1}, before, "again")
	require.NoError(t, err)
	require.Zero(t, n, "pending now, not dispatched")
	n, err = relaydb.RedispatchAggregate(ctx, db.Pool, "order", "o-1", before, "test")
	require.NoError(t, err)
	require.Zero(t, n, "nothing of o-1 left dispatched before the cut-off")
	n, err = relaydb.RedispatchAggregate(ctx, db.Pool, "order", "o-2", before, "workflow gone")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	var status, lastError string
	var due bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT status, last_error, next_attempt_at <= now() FROM outbox_events WHERE id = $1`, other).Scan(&status, &lastError, &due))
	require.Equal(t, "pending", status)
	require.Equal(t, "workflow gone", lastError)
	require.True(t, due, "claimable at once")
	require.Equal(t, 1, countRows(t, db, `SELECT count(*) FROM outbox_events WHERE status = 'quarantined'`))
	require.Equal(t, 1, countRows(t, db, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched'`))

	_, before, err = relaydb.StuckAggregates(ctx, db.Pool, 30*time.Minute)
	require.NoError(t, err)
	require.True(t, before.IsZero(), "nothing stuck: no cut-off")
}

func countRows(t *testing.T, db *ferrytest.DB, query string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), query).Scan(&n))
	return n
}

// The drift check's advice quotes the aggregate's literals.
func TestAdviceQuotesLiterals(t *testing.T) {
	t.Parallel()
	require.Equal(t, "UPDATE outbox_events SET status = 'pending', next_attempt_at = now() WHERE aggregate_type = 'order' AND aggregate_id = 'o''42' AND status = 'quarantined'",
		relaydb.AdviceRequeue("order", "o'42", "quarantined"))
	require.Equal(t, "UPDATE outbox_aggregates SET delivered_version = 7 WHERE aggregate_type = 'order' AND aggregate_id = 'o''42'",
		relaydb.AdviceSetDelivered("order", "o'42", 7))
}

// A row written around the check (the constraint dropped) is still read:
// a value that is not a string keeps its JSON text, a column that is no
// object reads as no headers. Nothing blocks the aggregate.
func TestLoadForPublishReadsHeadersWrittenAroundTheCheck(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, `ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_headers_valid`)
	require.NoError(t, err)
	insert := func(aggID, headers string) string {
		var id string
		require.NoError(t, db.Pool.QueryRow(ctx,
			`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('order', $1, 'created', '{}', $2::jsonb) RETURNING id::text`,
			aggID, headers).Scan(&id))
		return id
	}
	obj := insert("o-1", `{"n": 1, "s": "x", "nested": {"a": [1]}, "nil": null, "ferry-aggregate-id": "evil"}`)
	arr := insert("o-2", `["a"]`)

	row, err := relaydb.LoadForPublish(ctx, db.Pool, obj)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"n": "1", "s": "x", "nested": `{"a": [1]}`, "nil": "null", "ferry-aggregate-id": "evil"}, row.Headers)
	row, err = relaydb.LoadForPublish(ctx, db.Pool, arr)
	require.NoError(t, err)
	require.Nil(t, row.Headers)
}
