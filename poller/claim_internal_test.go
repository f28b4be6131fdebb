package poller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
)

// A claim extends its oldest rows with the later rows of their aggregates:
// an interleaved burst costs a signal per aggregate, not per event. Other
// aggregates' rows wait for the next claim, and delivered versions are
// never read.
func TestClaimTakesTheBacklogOfPickedAggregates(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	// Five rounds over aggregates a, b, c: a1 b1 c1 a2 b2 c2 …
	byAgg := map[string][]string{}
	for range 5 {
		for _, agg := range []string{"a", "b", "c"} {
			byAgg[agg] = append(byAgg[agg], insertEvent(t, db.Pool, "order", agg, nil))
		}
	}
	// A pending row of a's that is behind its lease is not claimable.
	leased := insertEvent(t, db.Pool, "order", "a", map[string]string{"next_attempt_at": "now() + interval '1 hour'"})

	p := newPoller(t, db.Pool, Config{Name: "claimer", BatchSize: 2})
	n, err := p.RunOnce(ctx) // the signals fail; only the claim matters
	require.Equal(t, 10, n, "a's and b's five rows each: %v", err)

	var claimed []string
	rows, err := db.Pool.Query(ctx, `SELECT aggregate_id FROM outbox_events WHERE claimed_by = 'claimer' ORDER BY aggregate_id, aggregate_version`)
	require.NoError(t, err)
	for rows.Next() {
		var agg string
		require.NoError(t, rows.Scan(&agg))
		claimed = append(claimed, agg)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"a", "a", "a", "a", "a", "b", "b", "b", "b", "b"}, claimed)
	for _, id := range byAgg["c"] {
		require.Equal(t, 0, attemptsOf(t, db.Pool, id), "c was not picked")
	}
	require.Equal(t, 0, attemptsOf(t, db.Pool, leased), "a row behind its lease stays out")
}

// The extension is bounded: BatchSize oldest rows plus 4×BatchSize more.
func TestClaimExtensionIsBounded(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	_, err := db.Pool.Exec(context.Background(), `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'hot', 'test.happened', '{}' FROM generate_series(1, 50)`)
	require.NoError(t, err)
	p := newPoller(t, db.Pool, Config{BatchSize: 3})
	n, _ := p.RunOnce(context.Background())
	require.Equal(t, 3+4*3, n)
}

// Delayed rows (deliver_after, migration 0009) stay out of the claim, and
// so do the later versions held behind them: the extension that takes an
// aggregate's later rows stops at a delayed one, so nothing overtakes it
// and the workflow never sees a later version early.
func TestClaimLeavesDelayedRowsAndThoseBehindThem(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	a1 := insertEvent(t, db.Pool, "order", "a", nil)
	a2 := insertEvent(t, db.Pool, "order", "a", map[string]string{"deliver_after": "now() + interval '1 hour'"})
	a3 := insertEvent(t, db.Pool, "order", "a", nil) // held behind a2
	b1 := insertEvent(t, db.Pool, "order", "b", map[string]string{"deliver_after": "now() + interval '1 hour'"})
	c1 := insertEvent(t, db.Pool, "order", "c", nil)

	p := newPoller(t, db.Pool, Config{Name: "claimer", BatchSize: 1})
	for range 3 {
		_, _ = p.RunOnce(ctx) // the signals fail; only the claims matter
	}
	require.Equal(t, 1, attemptsOf(t, db.Pool, a1), "a1 is due")
	require.Equal(t, 1, attemptsOf(t, db.Pool, c1), "another aggregate is not held")
	for name, id := range map[string]string{"a2 (delayed)": a2, "a3 (behind a2)": a3, "b1 (delayed)": b1} {
		require.Equal(t, 0, attemptsOf(t, db.Pool, id), "%s was claimed early", name)
	}

	// Due now (as if the hour had passed): a2 and a3 go in one claim.
	_, err := db.Pool.Exec(ctx, `UPDATE outbox_events SET next_attempt_at = now() - interval '1 second' WHERE id = ANY($1::uuid[])`, []string{a2, a3})
	require.NoError(t, err)
	_, _ = p.RunOnce(ctx)
	require.Equal(t, 1, attemptsOf(t, db.Pool, a2))
	require.Equal(t, 1, attemptsOf(t, db.Pool, a3), "claimed with a2 (the extension)")
	require.Equal(t, 0, attemptsOf(t, db.Pool, b1))
}
