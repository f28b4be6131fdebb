package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/workflows"
)

// A run took the signal of v1-v3 and died before the poller marked them,
// and a later event started a new run meanwhile: the rows are marked
// dispatched after the new run started, which holds only v4 and waits for
// v1 for ever. The new run has taken every signal it got (its state's
// unread is 0), so none of them can be waiting in its channel: the
// reconciler sets v1-v3 back to pending like the rows of any run that
// ended, and the new run publishes everything in order, each event once.
func TestReconcilerRedispatchesRowsMarkedAfterANewRunStarted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{noWorker: true})
	ctx := context.Background()
	ids := e.commitN(t, 3, 1)
	waitFor(t, 30*time.Second, "v1-v3 dispatched", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched'`) == 3
	})
	wf := workflows.WorkflowID(e.aggType, aggID(0))
	require.NoError(t, tclient.TerminateWorkflow(ctx, wf, "", "the run dies after Temporal took its signal, in a test"))
	for id := range e.commitN(t, 1, 1) {
		ids[id] = true
	}
	waitFor(t, 30*time.Second, "v4 dispatched", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched'`) == 4
	})
	second, err := tclient.DescribeWorkflowExecution(ctx, wf, "")
	require.NoError(t, err)
	started := second.GetWorkflowExecutionInfo().GetStartTime().AsTime()
	// The marks of v1-v3 land only now, after the new run started (the
	// poller that signalled the dead run was slow to mark them).
	_, err = e.db.Pool.Exec(ctx, `UPDATE outbox_events SET dispatched_at = now() WHERE aggregate_version <= 3`)
	require.NoError(t, err)
	var marked time.Time
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT min(dispatched_at) FROM outbox_events WHERE aggregate_version <= 3`).Scan(&marked))
	require.True(t, marked.After(started), "marked at %s, the new run started at %s", marked, started)

	reg := prometheus.NewRegistry()
	mm, err := metrics.NewMaintenance(reg)
	require.NoError(t, err)
	e.startFerry(t, ferryOpts{noPoller: true, maint: mm})
	waitFor(t, 30*time.Second, "the new run waiting for v1, every signal taken", func() bool {
		v, err := tclient.QueryWorkflow(ctx, wf, "", workflows.StateQuery)
		var st workflows.State
		return err == nil && v.Get(&st) == nil && slices.Equal(st.Pending, []int64{4}) && st.Unread != nil && *st.Unread == 0
	})
	var res workflows.ReconcileResult
	runWorkflow(t, e, "reconcile-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Millisecond, DriftSample: -1}, &res)
	require.Equal(t, int64(3), res.Redispatched, "v1-v3, not v4: %+v", res)
	require.Equal(t, []string{wf}, res.Aggregates)
	require.Equal(t, 3.0, ferrytest.Sample(t, reg, "ferry_reconciled_rows_total", map[string]string{"cause": metrics.ReconcileNotHeld}))

	msgs := e.br.Collect(t, 4, time.Minute)
	require.Len(t, msgs, 4)
	for i, m := range msgs {
		require.True(t, ids[m.MessageId])
		require.Equal(t, int64(i+1), m.Headers[broker.HeaderAggregateVersion], "in version order")
	}
	extra := e.br.Collect(t, 1, 2*time.Second)
	require.Empty(t, extra, "each event once")
	third, err := tclient.DescribeWorkflowExecution(ctx, wf, "")
	require.NoError(t, err)
	require.Equal(t, second.GetWorkflowExecutionInfo().GetExecution().GetRunId(), third.GetWorkflowExecutionInfo().GetExecution().GetRunId(),
		"the waiting run took them")
}

// A blocked run without a bound on its references leaves the signals that
// arrive meanwhile in its channel: rows dispatched after it started that
// it does not hold may be among them, so the reconciler leaves them alone
// (without the check it would re-dispatch them on every pass, each time a
// repeat signal into the same channel). Once the block is repaired, every
// event is published once, in order.
func TestReconcilerLeavesRowsAnOpenRunHasNotRead(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	reg := prometheus.NewRegistry()
	mm, err := metrics.NewMaintenance(reg)
	require.NoError(t, err)
	e.startFerry(t, ferryOpts{maxBlocked: -1, maint: mm, policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 2}}})
	ctx := context.Background()
	poison, err := e.commitType(ctx, "A", "poison", false)
	require.NoError(t, err)
	wf := workflows.WorkflowID(e.aggType, "A")
	waitBlocked(t, wf, poison)
	var later []string
	for range 2 {
		id, err := e.commit(ctx, "A", false)
		require.NoError(t, err)
		later = append(later, id)
	}
	waitFor(t, 30*time.Second, "v2 and v3 dispatched", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched'`) == 2
	})
	waitFor(t, 30*time.Second, "the blocked run with their signals unread", func() bool {
		v, err := tclient.QueryWorkflow(ctx, wf, "", workflows.StateQuery)
		var st workflows.State
		return err == nil && v.Get(&st) == nil && st.Blocked != nil && len(st.Pending) == 1 && st.Unread != nil && *st.Unread > 0
	})

	var res workflows.ReconcileResult
	runWorkflow(t, e, "reconcile-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Millisecond, DriftSample: -1}, &res)
	require.Equal(t, 1, res.Checked)
	require.Zero(t, res.Redispatched, "%+v", res)
	require.Equal(t, 2, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched' AND attempts = 1`))

	e.br.Bind(t, e.aggType+".poison")
	_, err = repair(t, wf, workflows.RepairRequest{RequestID: "retry-" + poison, Action: workflows.ActionRetry, EventID: poison, Actor: "ops", Reason: "queue bound"})
	require.NoError(t, err)
	msgs := e.br.Collect(t, 3, time.Minute)
	require.Len(t, msgs, 3)
	for i, m := range msgs {
		require.Equal(t, append([]string{poison}, later...)[i], m.MessageId, "in version order")
	}
	extra := e.br.Collect(t, 1, 2*time.Second)
	require.Empty(t, extra, "each event once")
}
