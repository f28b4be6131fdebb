package walrelay_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/walrelay"
)

// PostgreSQL streams a transaction once its commit record is flushed, but
// other sessions see its rows only a moment later, once it has left the
// running transactions. The moment is short on its own; a synchronous
// standby stretches it to the standby's round trip, since the committing
// session waits for the standby in between. These tests stretch it at will:
// a synchronous standby that never answers ("ghost") holds a commit that
// asks for it (synchronous_commit = on) until its wait is cancelled, which
// leaves the transaction committed and makes it visible.
func setupSyncStandby(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, "synchronous_standby_names=ghost", "synchronous_commit=local")
}

// heldCommit commits one event for aggregate agg in a transaction that
// waits for the ghost standby, and returns the event's id, the waiting
// session's pid and a channel that gets the commit's error once the wait
// is cancelled.
func (b *bundle) heldCommit(t *testing.T, agg string) (id string, pid uint32, done <-chan error) {
	t.Helper()
	ctx := context.Background()
	conn, err := b.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL synchronous_commit = on`)
	require.NoError(t, err)
	id = b.insertIn(t, tx, agg)[0]
	pid = conn.Conn().PgConn().PID()
	// A test that fails before release must not leave the commit waiting:
	// the pool's close would wait for its connection.
	t.Cleanup(func() { _, _ = b.db.Pool.Exec(context.Background(), `SELECT pg_cancel_backend($1)`, pid) })
	ch := make(chan error, 1)
	go func() {
		defer conn.Release()
		ch <- tx.Commit(context.Background())
	}()
	waitFor(t, 10*time.Second, "the commit waiting for the standby", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'`, pid) == 1
	})
	// The commit record is flushed; wait until the relay's walsender has
	// sent it.
	var flushed string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&flushed))
	waitFor(t, 10*time.Second, "the held commit sent to the relay", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid
			WHERE s.slot_name = 'ferry_outbox' AND r.sent_lsn >= $1::pg_lsn`, flushed) == 1
	})
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1`, id), "not visible yet")
	return id, pid, ch
}

// release cancels the held commit's wait: the transaction stays committed
// and becomes visible.
func (b *bundle) release(t *testing.T, pid uint32, done <-chan error) {
	t.Helper()
	var ok bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT pg_cancel_backend($1)`, pid).Scan(&ok))
	require.True(t, ok)
	select {
	case err := <-done:
		require.NoError(t, err, "a cancelled wait for the standby leaves the transaction committed (with a warning)")
	case <-time.After(10 * time.Second):
		t.Fatal("the held commit did not return")
	}
}

// A streamed row is handed to Temporal only once other sessions see it: a
// workflow that loaded it before would find no row (and quarantine the
// event as missing), and the mark that follows the dispatch would miss it
// and leave it pending. This is what made TestStreamsCommittedInsertsInCommitOrder
// time out once: its dispatcher answers at once, so its mark can run within
// the moment, and no catch-up pass claims the row in that test.
func TestStreamedRowsAreDispatchedOnceVisible(t *testing.T) {
	t.Parallel()
	b := setupSyncStandby(t)
	b.rec.checkVisible = true
	b.relay(t, walrelay.Config{})
	first := b.insert(t, false, "a")
	waitFor(t, 30*time.Second, "an ordinary commit streamed and marked", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'dispatched'`, first[0]) == 1
	})

	id, pid, done := b.heldCommit(t, "held")
	// Long enough for the relay to dispatch what it has (BatchWait is
	// 10ms): it must not while the row is not visible.
	time.Sleep(2 * time.Second)
	require.Zero(t, b.rec.ids()[id], "dispatched before other sessions can see it")
	b.release(t, pid, done)

	waitFor(t, 30*time.Second, "the row dispatched once visible", func() bool { return b.rec.ids()[id] == 1 })
	waitFor(t, 30*time.Second, "the row marked dispatched", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'dispatched'`, id) == 1
	})
	require.Empty(t, b.rec.invisibleAtDispatch(), "every dispatched row was visible when it was dispatched")
}

// A row that stays invisible longer than the relay waits (a standby that
// does not answer for long) does not hold the stream: the relay moves on
// and leaves the row to the catch-up pass, which sees it pending once it is
// visible.
func TestRowsInvisibleForLongAreLeftToTheCatchUpPass(t *testing.T) {
	t.Parallel()
	b := setupSyncStandby(t)
	b.rec.checkVisible = true
	r, err := walrelay.New(walrelay.Config{Pool: b.db.Pool, Poller: b.rec, CatchUpInterval: time.Second,
		StatusInterval: 200 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	walrelay.SetVisibleTimeout(r, 500*time.Millisecond)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)

	id, pid, done := b.heldCommit(t, "held")
	after := b.insert(t, false, "after")
	waitFor(t, 30*time.Second, "the stream moved on to the next transaction", func() bool { return b.rec.ids()[after[0]] == 1 })
	require.Zero(t, b.rec.ids()[id], "the invisible row was not dispatched")
	b.release(t, pid, done)
	waitFor(t, 30*time.Second, "a catch-up pass that sees the row pending", func() bool {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return slices.Contains(b.rec.pending, id)
	})
	require.Zero(t, b.rec.ids()[id], "the stream never dispatched it")
	require.Empty(t, b.rec.invisibleAtDispatch())
}

// visibleIDs is which of ids another session sees now.
func visibleIDs(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, ids []string) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT id::text FROM outbox_events WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, err
	}
	seen, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range seen {
		out[s] = true
	}
	return out, nil
}
