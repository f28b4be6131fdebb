package walrelay_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/walrelay"
)

// insertDelayed commits one event of aggregate agg whose deliver_after is
// delay ahead of the database's clock (no deliver_after when zero); it
// returns the id and the stored deliver_after (zero when NULL).
func (b *bundle) insertDelayed(t *testing.T, agg string, delay time.Duration) (string, time.Time) {
	t.Helper()
	var id string
	var after *time.Time
	var d *time.Duration
	if delay > 0 {
		d = &delay
	}
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, deliver_after)
		VALUES ('order', $1, 'changed', '{}', now() + $2::interval) RETURNING id::text, deliver_after`, agg, d).Scan(&id, &after))
	if after == nil {
		return id, time.Time{}
	}
	return id, *after
}

// drainsAfter is the catch-up passes that started at or after at, with the
// rows pending at each.
func (r *recorder) drainsAfter(at time.Time) (times []time.Time, pending [][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, d := range r.drainAt {
		if !d.Before(at) {
			times = append(times, d)
			pending = append(pending, r.pendingAt[i])
		}
	}
	return times, pending
}

// drainsBetween is the catch-up passes that started in [from, to).
func (r *recorder) drainsBetween(from, to time.Time) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, d := range r.drainAt {
		if !d.Before(from) && d.Before(to) {
			out = append(out, d)
		}
	}
	return out
}

// delayedScenario writes a delayed event, a later version of its
// aggregate held behind it, and an event of another aggregate, then checks
// that the stream delivered only the last and left the others to a
// catch-up pass that runs at their time, long before CatchUpInterval (30s
// by default) would have.
func delayedScenario(t *testing.T, b *bundle) {
	t.Helper()
	waitFor(t, 30*time.Second, "the first catch-up pass", func() bool {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return b.rec.drains > 0
	})
	d1, due := b.insertDelayed(t, "d", 2*time.Second)
	d2, held := b.insertDelayed(t, "d", 0)
	require.Equal(t, due, held, "the later version is held until the delayed one's time")
	x, _ := b.insertDelayed(t, "x", 0)
	sentinel, _ := b.insertDelayed(t, "y", 0)

	waitFor(t, 30*time.Second, "the other aggregates streamed", func() bool {
		ids := b.rec.ids()
		return ids[x] == 1 && ids[sentinel] == 1
	})
	require.True(t, time.Now().Before(due), "the stream took longer than the delay: the test proves nothing")
	ids := b.rec.ids()
	require.Zero(t, ids[d1], "the delayed row was streamed")
	require.Zero(t, ids[d2], "the row held behind it was streamed")

	waitFor(t, 10*time.Second, "a catch-up pass at the delayed rows' time", func() bool {
		times, _ := b.rec.drainsAfter(due)
		return len(times) > 0
	})
	times, pending := b.rec.drainsAfter(due)
	late := times[0].Sub(due)
	t.Logf("the catch-up pass ran %s after the delayed rows' time", late)
	require.Less(t, late, 2*time.Second, "the pass waits for the next due row, not for CatchUpInterval")
	require.Subset(t, pending[0], []string{d1, d2}, "the pass sees both rows pending")
	require.Empty(t, b.rec.drainsBetween(due.Add(-2*time.Second), due), "no catch-up pass ran while they waited (nothing else was due)")
	require.Zero(t, b.rec.ids()[d1], "nor did the stream send them later")
}

// The stream leaves delayed rows (and the rows held behind them) to the
// catch-up pass, which runs when they are due.
func TestDelayedRowsAreLeftToTheCatchUpPassAtTheirTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.relay(t, walrelay.Config{})
	delayedScenario(t, b)
}

// A publication Ferry created before delayed events (without
// deliver_after) gets the column at start.
func TestOldPublicationGetsDeliverAfter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.db.Pool.Exec(context.Background(), `CREATE PUBLICATION ferry_outbox
		FOR TABLE outbox_events (id, aggregate_type, aggregate_id, aggregate_version, event_type, trace_parent, trace_state, status)
		WITH (publish = 'insert')`)
	require.NoError(t, err)
	b.relay(t, walrelay.Config{})
	require.Contains(t, b.publishedColumns(t, "ferry_outbox"), "deliver_after")
	delayedScenario(t, b)
}

// A publication of the user's own without deliver_after is left alone; the
// relay asks the database which streamed rows are delayed.
func TestPublicationWithoutDeliverAfterStillHoldsDelayedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.db.Pool.Exec(context.Background(), `CREATE PUBLICATION theirs
		FOR TABLE outbox_events (id, aggregate_type, aggregate_id, aggregate_version, event_type, status)
		WITH (publish = 'insert')`)
	require.NoError(t, err)
	b.relay(t, walrelay.Config{Publication: "theirs"})
	delayedScenario(t, b)
	require.NotContains(t, b.publishedColumns(t, "theirs"), "deliver_after")
}

func (b *bundle) publishedColumns(t *testing.T, publication string) []string {
	t.Helper()
	var cols []string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT attnames FROM pg_publication_tables WHERE pubname = $1 AND tablename = 'outbox_events'`, publication).Scan(&cols))
	slices.Sort(cols)
	return cols
}
