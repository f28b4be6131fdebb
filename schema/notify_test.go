package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
)

// holdsNotifyLock says whether tx took the advisory lock that elects the
// one transaction at a time that notifies (migration 0004).
func holdsNotifyLock(t *testing.T, tx pgx.Tx) bool {
	t.Helper()
	var n int
	require.NoError(t, tx.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid()
		  AND ((classid::bigint << 32) | objid::bigint) = 439788663417`).Scan(&n))
	return n == 1
}

func insertEvent(t *testing.T, tx pgx.Tx, aggID string) {
	t.Helper()
	_, err := tx.Exec(context.Background(),
		`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'placed', '{}')`, aggID)
	require.NoError(t, err)
}

// notifyingTx begins a transaction that inserts an event and holds the
// notify lock. The lock is database-wide, hence the test's own database.
func notifyingTx(t *testing.T, db *ferrytest.DB, aggID string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	insertEvent(t, tx, aggID)
	require.True(t, holdsNotifyLock(t, tx), "a lone transaction with an outbox row takes the notify lock")
	return tx
}

// While one transaction with outbox rows is in flight, the others skip
// their NOTIFY (and with it the commit-time lock that serialises
// notifiers); once it ended, the next one notifies again.
func TestNotifyIsCoalesced(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewOwnDB(t, "")
	ctx := context.Background()

	first := notifyingTx(t, db, "o-1")

	second, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = second.Rollback(ctx) }()
	insertEvent(t, second, "o-2")
	require.False(t, holdsNotifyLock(t, second), "an overlapping transaction skips its NOTIFY")
	require.NoError(t, second.Commit(ctx))
	require.NoError(t, first.Commit(ctx))

	// Alone again: notifies, and the listener hears it.
	listener, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, `LISTEN ferry_outbox`)
	require.NoError(t, err)
	defer func() { _, _ = listener.Exec(ctx, `UNLISTEN *`) }()

	third := notifyingTx(t, db, "o-3")
	require.NoError(t, third.Commit(ctx))

	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := listener.Conn().WaitForNotification(wctx)
	require.NoError(t, err, "no NOTIFY after a lone transaction's commit")
	require.Equal(t, "ferry_outbox", n.Channel)
}
