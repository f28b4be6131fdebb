package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/workflows"
)

// historyFigures are the sizes of every run of one workflow ID.
type historyFigures struct {
	runs         int
	events       int   // history events, all runs
	largestEvent int   // bytes of the largest history event (a signal, an input)
	largestRun   int64 // bytes of the largest run's history
}

func measureHistory(t *testing.T, workflowID string) historyFigures {
	t.Helper()
	ctx := context.Background()
	resp, err := tclient.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: namespace, Query: fmt.Sprintf("WorkflowId = '%s'", workflowID), PageSize: 1000,
	})
	require.NoError(t, err)
	var f historyFigures
	for _, ex := range resp.Executions {
		f.runs++
		var run int64
		it := tclient.GetWorkflowHistory(ctx, workflowID, ex.Execution.RunId, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(t, err)
			n := proto.Size(ev)
			f.events++
			run += int64(n)
			f.largestEvent = max(f.largestEvent, n)
		}
		f.largestRun = max(f.largestRun, run)
	}
	return f
}

// busyBlocked: a poison event, then n events on the same aggregate, while
// the blocked workflow keeps at most maxBlocked references (0: the
// default). The rest stay pending in PostgreSQL, held; the repair releases
// them; every event is delivered once in order, and the workflow's history
// and inputs stay far below Temporal's limits.
func busyBlocked(t *testing.T, n, maxBlocked int) {
	t.Helper()
	e := setup(t)
	ctx := context.Background()
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	e.startFerry(t, ferryOpts{metrics: m, maxBlocked: maxBlocked, policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 2}}})
	bound := maxBlocked
	if bound == 0 {
		bound = workflows.DefaultMaxBlockedRefs
	}
	l, _ := e.consume(t)

	start := time.Now()
	poison, err := e.commitType(ctx, "HOT", "poison", false)
	require.NoError(t, err)
	_, err = e.db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT $1, 'HOT', 'changed', jsonb_build_object('n', i) FROM generate_series(1, $2) i`, e.aggType, n)
	require.NoError(t, err)
	wf := workflows.WorkflowID(e.aggType, "HOT")
	waitBlocked(t, wf, poison)
	held := n + 1 - bound
	waitFor(t, 5*time.Minute, fmt.Sprintf("%d events held in PostgreSQL", held), func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'pending' AND last_error LIKE 'held:%'`) == held
	})
	blockedAt := time.Now()
	v, err := tclient.QueryWorkflow(ctx, wf, "", workflows.StateQuery)
	require.NoError(t, err)
	var st workflows.State
	require.NoError(t, v.Get(&st))
	require.Len(t, st.Pending, bound, "the blocked run keeps the bound")
	require.Equal(t, int64(1), st.Pending[0])
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched' AND aggregate_version > $1`, bound),
		"a row the workflow does not hold is marked dispatched")

	e.br.Bind(t, e.aggType+".poison")
	_, err = repair(t, wf, workflows.RepairRequest{RequestID: "busy-1", Action: workflows.ActionRetry, EventID: poison, Actor: "ops", Reason: "queue bound"})
	require.NoError(t, err)
	waitFor(t, 10*time.Minute, fmt.Sprintf("all %d events delivered", n+1), func() bool { return l.unique() == n+1 })
	drained := time.Now()
	l.requireInOrder(t)
	require.Equal(t, n+1, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`))

	f := measureHistory(t, wf)
	t.Logf("busy blocked aggregate: %d events (bound %d, %d held): blocked and held in %s, repaired and drained in %s; "+
		"%d runs, %d history events, largest history event %d bytes, largest run %d bytes; %d duplicate deliveries",
		n+1, bound, held, blockedAt.Sub(start).Round(time.Millisecond), drained.Sub(blockedAt).Round(time.Millisecond),
		f.runs, f.events, f.largestEvent, f.largestRun, l.duplicates)
	// Temporal refuses a payload over 2 MB and warns at 512 KB; a run's
	// history is limited to 50 MB (warning at 10 MB).
	require.Less(t, f.largestEvent, 512<<10, "a history event near Temporal's payload warning")
	require.Less(t, f.largestRun, int64(10<<20), "a run's history near Temporal's size warning")
}

// The CI size of the case (the 50,000-event run is in the faults
// suite: TestLongBusyBlockedAggregate).
func TestBusyBlockedAggregateHoldsBoundedReferences(t *testing.T) {
	t.Parallel()
	busyBlocked(t, 3000, 500)
}
