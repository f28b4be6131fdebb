package repairdb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/repairdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The repair functions return the driver's errors so their callers can
// classify them, and a repair's audit row lives and dies with the
// transaction of its change: these are the contracts the activities rely
// on.
func TestRepairFunctionsKeepTheirContracts(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	var e1 string
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status)
		VALUES ('order', 'o-1', 'created', '{"n": 1}', 'published') RETURNING id::text`).Scan(&e1))
	var pgErr *pgconn.PgError

	_, err := repairdb.FindRepair(ctx, db.Pool, "r-1")
	require.ErrorIs(t, err, pgx.ErrNoRows)
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		ev, err := repairdb.LockForRepair(ctx, tx, e1)
		require.NoError(t, err)
		require.Equal(t, "published", ev.Status)
		a := repairdb.Audit{RequestID: "r-1", Actor: "test", Action: "replay", EventID: e1, AggregateType: ev.AggregateType,
			AggregateID: ev.AggregateID, Version: ev.Version, Reason: "test", PayloadSHA256Before: "x", PayloadSHA256After: "x",
			SchemaVersionBefore: ev.SchemaVersion, SchemaVersionAfter: ev.SchemaVersion}
		inserted, err := repairdb.InsertReplay(ctx, tx, a)
		require.NoError(t, err)
		require.True(t, inserted)
		inserted, err = repairdb.InsertReplay(ctx, tx, a)
		require.NoError(t, err)
		require.False(t, inserted, "a repeated request id is not audited twice")
		a.RequestID, a.Reason = "r-2", ""
		_, err = repairdb.InsertReplay(ctx, tx, a)
		require.True(t, errors.As(err, &pgErr) && pgErr.Code == "23514", "an empty reason is refused: %v", err)
		return nil
	})
	require.Error(t, err, "the refused insert aborted the transaction")
	_, err = repairdb.FindRepair(ctx, db.Pool, "r-1")
	require.ErrorIs(t, err, pgx.ErrNoRows, "rolled back with its transaction")
	_, err = repairdb.LockWithCursor(ctx, db.Pool, "00000000-0000-0000-0000-000000000000")
	require.ErrorIs(t, err, pgx.ErrNoRows)
}

// A skip marks the row skipped and moves its aggregate's cursor past it in
// the same statement; a late skip of an earlier version does not move the
// cursor back.
func TestSkipMovesTheCursor(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	insert := func(status string) string {
		var id string
		require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status)
			VALUES ('order', 'o-1', 'created', '{}', $1) RETURNING id::text`, status).Scan(&id))
		return id
	}
	v1, v2 := insert("quarantined"), insert("quarantined")
	delivered := func() int64 {
		var v int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT delivered_version FROM outbox_aggregates WHERE aggregate_type = 'order' AND aggregate_id = 'o-1'`).Scan(&v))
		return v
	}
	require.Zero(t, delivered())
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return repairdb.Skip(ctx, tx, v2) }))
	require.Equal(t, int64(2), delivered())
	require.NoError(t, repairdb.Skip(ctx, db.Pool, v1))
	require.Equal(t, int64(2), delivered(), "GREATEST: a late skip does not move the cursor back")
	rows, err := db.Pool.Query(ctx, `SELECT status FROM outbox_events ORDER BY aggregate_version`)
	require.NoError(t, err)
	statuses, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"skipped", "skipped"}, statuses)
}
