package poller

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

// Dispatch groups events per aggregate as RunOnce does; a refused
// aggregate comes back with all of its events' ids, and nothing is claimed,
// released or marked.
func TestDispatchReportsRefusedAggregatesWithTheirEvents(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	p := newPoller(t, db.Pool, Config{})
	a1 := insertEvent(t, db.Pool, "order", "a", nil)
	b1 := insertEvent(t, db.Pool, "order", "b", nil)
	a2 := insertEvent(t, db.Pool, "order", "a", nil)
	events := []Event{
		{ID: a1, AggregateType: "order", AggregateID: "a", EventType: "t", Version: 1},
		{ID: b1, AggregateType: "order", AggregateID: "b", EventType: "t", Version: 1},
		{ID: a2, AggregateType: "order", AggregateID: "a", EventType: "t", Version: 2},
	}
	accepted, failed := p.Dispatch(context.Background(), events)
	require.Empty(t, accepted, "Temporal is unreachable")
	require.Len(t, failed, 2, "one failure per aggregate")
	byWorkflow := map[string][]string{}
	for _, f := range failed {
		require.Error(t, f.Err)
		byWorkflow[f.WorkflowID] = f.IDs
	}
	require.Equal(t, map[string][]string{
		workflows.WorkflowID("order", "a"): {a1, a2},
		workflows.WorkflowID("order", "b"): {b1},
	}, byWorkflow)
	for _, id := range []string{a1, b1, a2} {
		r := readRow(t, db.Pool, id)
		require.Equal(t, "pending", r.Status)
		require.Zero(t, r.Attempts, "Dispatch claims nothing")
		require.Nil(t, r.ClaimedBy)
		require.Nil(t, r.LastError, "Dispatch releases nothing")
	}
	accepted, failed = p.Dispatch(context.Background(), nil)
	require.Empty(t, accepted)
	require.Empty(t, failed)
}

// MarkDispatched moves pending rows to dispatched and leaves a published
// row published, as RunOnce's mark does.
func TestMarkDispatched(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	p := newPoller(t, db.Pool, Config{})
	pending := insertEvent(t, db.Pool, "order", "a", nil)
	published := insertEvent(t, db.Pool, "order", "a", map[string]string{"status": "'published'"})
	require.NoError(t, p.MarkDispatched(context.Background(), []string{pending, published}))
	require.Equal(t, "dispatched", readRow(t, db.Pool, pending).Status)
	require.Equal(t, "published", readRow(t, db.Pool, published).Status)
	require.NoError(t, p.MarkDispatched(context.Background(), nil))
}

// Drain ends at the first failed batch (its rows back off) and on an
// empty one; the claims that succeed end to end are in dev/e2e/wal_test.go.
func TestDrainStopsAtTheFirstErrorAndOnNothing(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	p := newPoller(t, db.Pool, Config{BatchSize: 2})
	n, err := p.Drain(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	var ids []string
	for _, agg := range []string{"a", "b", "c", "d", "e"} {
		ids = append(ids, insertEvent(t, db.Pool, "order", agg, nil))
	}
	n, err = p.Drain(context.Background())
	require.Error(t, err, "Temporal is unreachable: the first batch's signals fail")
	require.Equal(t, 2, n, "the pass ends at the first error")
	claimed := 0
	for _, id := range ids {
		if readRow(t, db.Pool, id).Attempts > 0 {
			claimed++
		}
	}
	require.Equal(t, 2, claimed)
	require.True(t, slices.ContainsFunc(ids, func(id string) bool { return readRow(t, db.Pool, id).Attempts == 0 }))
}
