package poller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/internal/testenv"
)

// A claim extends its oldest rows with the later rows of their aggregates:
// an interleaved burst costs a signal per aggregate, not per event. Other
// aggregates' rows wait for the next claim, and delivered versions are
// never read.
func TestClaimTakesTheBacklogOfPickedAggregates(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
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
	db := testenv.Postgres(t)
	_, err := db.Pool.Exec(context.Background(), `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'hot', 'test.happened', '{}' FROM generate_series(1, 50)`)
	require.NoError(t, err)
	p := newPoller(t, db.Pool, Config{BatchSize: 3})
	n, _ := p.RunOnce(context.Background())
	require.Equal(t, 3+4*3, n)
}
