package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

func runWorkflow(t *testing.T, e *env, id, name string, arg, result any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := tclient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: e.taskQueue}, name, arg)
	require.NoError(t, err)
	require.NoError(t, run.Get(ctx, result))
}

// Retention deletes exactly the delivered rows past their age, in batches,
// and leaves pending, dispatched and quarantined rows alone however old.
func TestRetentionDeletesOnlyEligibleRows(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	mm, err := metrics.NewMaintenance(reg)
	require.NoError(t, err)
	e.startFerry(t, ferryOpts{noPoller: true, maint: mm})
	ctx := context.Background()

	// 5 old published, 1 old skipped, 2 recent published; old pending,
	// dispatched and quarantined rows that must survive.
	insert := func(status string, age time.Duration, n int) {
		for range n {
			_, err := e.db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, published_at)
				VALUES ($1, 'r', 'x', '{"a":1}', $2, now() - $3::interval, CASE WHEN $2 = 'published' THEN now() - $3::interval END)`,
				e.aggType, status, age)
			require.NoError(t, err)
		}
	}
	old, recent := 40*24*time.Hour, time.Hour
	insert("published", old, 5)
	insert("skipped", old, 1)
	insert("published", recent, 2)
	insert("pending", old, 1)
	insert("dispatched", old, 1)
	insert("quarantined", old, 1)

	var res workflows.RetentionResult
	runWorkflow(t, e, "retention-"+e.taskQueue, workflows.RetentionWorkflowName,
		workflows.RetentionInput{RowAge: 30 * 24 * time.Hour, PayloadAge: 2 * 24 * time.Hour, BatchSize: 2}, &res)
	require.Equal(t, int64(6), res.Deleted)
	require.Zero(t, res.PayloadsPurged, "the old rows were deleted, the recent ones are younger than PayloadAge")
	require.Equal(t, 5, res.Batches, "6 rows in batches of 2: 3 full batches and an empty one, then one empty payload batch")
	require.Equal(t, 5, e.count(t, `SELECT count(*) FROM outbox_events`))
	require.Equal(t, 2, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`))
	require.Equal(t, 3, e.count(t, `SELECT count(*) FROM outbox_events WHERE status IN ('pending', 'dispatched', 'quarantined')`))
	require.Equal(t, 0, e.count(t, `SELECT count(*) FROM outbox_events WHERE payload = 'null'::jsonb`), "recent payloads kept")

	var again workflows.RetentionResult
	runWorkflow(t, e, "retention2-"+e.taskQueue, workflows.RetentionWorkflowName,
		workflows.RetentionInput{RowAge: 30 * 24 * time.Hour, PayloadAge: time.Minute, BatchSize: 2}, &again)
	require.Zero(t, again.Deleted)
	require.Equal(t, int64(2), again.PayloadsPurged)
	require.Equal(t, 2, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published' AND payload = 'null'::jsonb`),
		"identity and timestamps kept, payload gone")
	require.Equal(t, 6.0, ferrytest.Sample(t, reg, "ferry_retention_rows_total", map[string]string{"step": metrics.StepDelete}))
	require.Equal(t, 2.0, ferrytest.Sample(t, reg, "ferry_retention_rows_total", map[string]string{"step": metrics.StepPurgePayloads}))

	// A batch size above 1000 is held to 1000 rows per statement.
	_, err = e.db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, published_at)
		SELECT $1, 'many', 'x', '{}', 'published', now() - interval '40 days', now() - interval '40 days' FROM generate_series(1, 1500)`, e.aggType)
	require.NoError(t, err)
	var big workflows.RetentionResult
	runWorkflow(t, e, "retention3-"+e.taskQueue, workflows.RetentionWorkflowName,
		workflows.RetentionInput{RowAge: 30 * 24 * time.Hour, BatchSize: 5000}, &big)
	require.Equal(t, int64(1500), big.Deleted)
	require.Equal(t, 2, big.Batches, "1000 rows, then 500")
	require.Equal(t, 1506.0, ferrytest.Sample(t, reg, "ferry_retention_rows_total", map[string]string{"step": metrics.StepDelete}))
}

// Two Ferry workers keeping the schedules in place make one schedule per
// job, not two, and retention runs once per tick, not once per worker:
// every run is the schedule's, and each eligible row is deleted by exactly
// one of them.
func TestRetentionRunsOncePerTickWithTwoWorkers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const every = 2 * time.Second
	s := &worker.Schedules{RetentionEvery: every, ReconcileEvery: time.Hour,
		Retention: workflows.RetentionInput{RowAge: 30 * 24 * time.Hour, BatchSize: 2}}
	ctx := context.Background()
	t.Cleanup(func() {
		for _, id := range []string{workflows.RetentionScheduleID, workflows.ReconcileScheduleID} {
			_ = tclient.ScheduleClient().GetHandle(ctx, id+"/"+e.taskQueue).Delete(ctx)
		}
	})
	for range 5 {
		_, err := e.db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, published_at)
			VALUES ($1, 'r', 'x', '{}', 'published', now() - interval '40 days', now() - interval '40 days')`, e.aggType)
		require.NoError(t, err)
	}
	e.startFerry(t, ferryOpts{noPoller: true, schedules: s})
	e.startFerry(t, ferryOpts{noPoller: true, schedules: s})

	// One schedule per job on this task queue, whichever worker made it.
	it, err := tclient.ScheduleClient().List(ctx, client.ScheduleListOptions{})
	require.NoError(t, err)
	perJob := map[string]int{}
	for it.HasNext() {
		entry, err := it.Next()
		require.NoError(t, err)
		if strings.HasSuffix(entry.ID, "/"+e.taskQueue) {
			perJob[entry.WorkflowType.Name]++
		}
	}
	require.Equal(t, map[string]int{workflows.RetentionWorkflowName: 1, workflows.ReconcileWorkflowName: 1}, perJob)
	for _, id := range []string{workflows.RetentionScheduleID, workflows.ReconcileScheduleID} {
		d, err := tclient.ScheduleClient().GetHandle(ctx, id+"/"+e.taskQueue).Describe(ctx)
		require.NoError(t, err, id)
		require.Len(t, d.Schedule.Spec.Intervals, 1)
	}

	// Let it tick a few times; then the runs are exactly the schedule's
	// actions, each completed, together deleting each row once.
	handle := tclient.ScheduleClient().GetHandle(ctx, workflows.RetentionScheduleID+"/"+e.taskQueue)
	var actions int
	waitFor(t, 30*time.Second, "three retention ticks", func() bool {
		d, err := handle.Describe(ctx)
		require.NoError(t, err)
		actions = d.Info.NumActions
		return actions >= 3
	})
	require.NoError(t, handle.Pause(ctx, client.SchedulePauseOptions{Note: "test: count the runs"}))
	d, err := handle.Describe(ctx)
	require.NoError(t, err)
	actions = d.Info.NumActions
	query := fmt.Sprintf("WorkflowType = '%s' AND TaskQueue = '%s'", workflows.RetentionWorkflowName, e.taskQueue)
	var runs []*workflowpb.WorkflowExecutionInfo
	waitFor(t, 30*time.Second, "every run in the visibility store", func() bool {
		resp, err := tclient.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: query})
		require.NoError(t, err)
		runs = resp.GetExecutions()
		return len(runs) >= actions
	})
	require.Len(t, runs, actions, "one retention run per tick, not one per worker")
	var deleted int64
	for _, r := range runs {
		var res workflows.RetentionResult
		require.NoError(t, tclient.GetWorkflow(ctx, r.GetExecution().GetWorkflowId(), r.GetExecution().GetRunId()).Get(ctx, &res))
		deleted += res.Deleted
	}
	require.Equal(t, int64(5), deleted, "each eligible row deleted by exactly one run")
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_events`))
}

// An aggregate workflow terminated with rows still dispatched: the
// reconciler sets them back to pending, the poller starts a new run, and
// everything is delivered in order.
func TestReconcilerRedispatchesRowsOfALostWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{noWorker: true})
	ctx := context.Background()
	ids := e.commitN(t, 3, 1)
	waitFor(t, 30*time.Second, "rows dispatched", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched'`) == 3
	})
	wf := workflows.WorkflowID(e.aggType, aggID(0))
	require.NoError(t, tclient.TerminateWorkflow(ctx, wf, "", "operator mistake, in a test"))

	reg := prometheus.NewRegistry()
	mm, err := metrics.NewMaintenance(reg)
	require.NoError(t, err)
	e.startFerry(t, ferryOpts{noPoller: true, maint: mm})
	var res workflows.ReconcileResult
	runWorkflow(t, e, "reconcile-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Millisecond}, &res)
	require.Equal(t, int64(3), res.Redispatched)
	require.Equal(t, []string{wf}, res.Aggregates)
	require.Equal(t, 3.0, ferrytest.Sample(t, reg, "ferry_reconciled_rows_total", map[string]string{"cause": metrics.ReconcileNotRunning}))

	msgs := e.br.Collect(t, 3, time.Minute)
	require.Len(t, msgs, 3)
	for i, m := range msgs {
		require.True(t, ids[m.MessageId])
		require.Equal(t, int64(i+1), m.Headers[broker.HeaderAggregateVersion])
	}

	// A running workflow is left alone.
	var none workflows.ReconcileResult
	runWorkflow(t, e, "reconcile2-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Millisecond}, &none)
	require.Zero(t, none.Redispatched)
}

// An aggregate run terminated with rows still dispatched, and a later event
// that started a new run before the reconciler came by: the new run resumes
// from the delivered version and waits for the versions its dead
// predecessor held, which only a re-dispatch brings. The reconciler sets
// exactly those rows back to pending (not the one the live run holds), and
// the new run publishes everything in order, each event once.
func TestReconcilerRedispatchesRowsANewRunWaitsFor(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{noWorker: true})
	ctx := context.Background()
	ids := e.commitN(t, 3, 1)
	waitFor(t, 30*time.Second, "v1-v3 dispatched", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched'`) == 3
	})
	wf := workflows.WorkflowID(e.aggType, aggID(0))
	first, err := tclient.DescribeWorkflowExecution(ctx, wf, "")
	require.NoError(t, err)
	require.NoError(t, tclient.TerminateWorkflow(ctx, wf, "", "operator mistake, in a test"))

	// v4 starts a new run, which holds it and waits for v1-v3.
	for id := range e.commitN(t, 1, 1) {
		ids[id] = true
	}
	waitFor(t, 30*time.Second, "v4 dispatched", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched'`) == 4
	})
	second, err := tclient.DescribeWorkflowExecution(ctx, wf, "")
	require.NoError(t, err)
	require.NotEqual(t, first.GetWorkflowExecutionInfo().GetExecution().GetRunId(), second.GetWorkflowExecutionInfo().GetExecution().GetRunId())

	reg := prometheus.NewRegistry()
	mm, err := metrics.NewMaintenance(reg)
	require.NoError(t, err)
	e.startFerry(t, ferryOpts{noPoller: true, maint: mm})
	waitFor(t, 30*time.Second, "the new run waiting for v1", func() bool {
		v, err := tclient.QueryWorkflow(ctx, wf, "", workflows.StateQuery)
		var st workflows.State
		return err == nil && v.Get(&st) == nil && slices.Equal(st.Pending, []int64{4})
	})
	// Without the new run's start to compare with, everything dispatched
	// would look old enough: the reconciler must tell v4 (held) apart.
	var res workflows.ReconcileResult
	runWorkflow(t, e, "reconcile-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Millisecond, DriftSample: -1}, &res)
	require.Equal(t, int64(3), res.Redispatched, "v1-v3, not v4: %+v", res)
	require.Equal(t, []string{wf}, res.Aggregates)
	require.Equal(t, 3.0, ferrytest.Sample(t, reg, "ferry_reconciled_rows_total", map[string]string{"cause": metrics.ReconcileNotHeld}))
	require.Zero(t, ferrytest.Sample(t, reg, "ferry_reconciled_rows_total", map[string]string{"cause": metrics.ReconcileNotRunning}))

	msgs := e.br.Collect(t, 4, time.Minute)
	require.Len(t, msgs, 4)
	for i, m := range msgs {
		require.True(t, ids[m.MessageId])
		require.Equal(t, int64(i+1), m.Headers[broker.HeaderAggregateVersion], "in version order")
	}
	extra := e.br.Collect(t, 1, 2*time.Second)
	require.Empty(t, extra, "each event once")
	require.Equal(t, 4, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`))
	require.Equal(t, 1, e.count(t, `SELECT attempts FROM outbox_events WHERE aggregate_version = 4`),
		"the live run's row was never claimed again")
	require.Equal(t, 3, e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_version <= 3 AND attempts = 2`),
		"v1-v3 were claimed once more")
	third, err := tclient.DescribeWorkflowExecution(ctx, wf, "")
	require.NoError(t, err)
	require.Equal(t, second.GetWorkflowExecutionInfo().GetExecution().GetRunId(), third.GetWorkflowExecutionInfo().GetExecution().GetRunId(),
		"the waiting run took them")

	var none workflows.ReconcileResult
	runWorkflow(t, e, "reconcile2-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Millisecond, DriftSample: -1}, &none)
	require.Zero(t, none.Redispatched)
}

// The drift check compares a sample of aggregates' rows with their running
// workflows and reports each kind of disagreement once, with the aggregate,
// what differs and what to do; a healthy aggregate is not reported.
func TestDriftCheckReportsEachKind(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	mm, err := metrics.NewMaintenance(reg)
	require.NoError(t, err)
	// Keep-alive: the drift check compares rows with *running* workflows,
	// and a one-shot run is over once its events are published.
	e.startFerry(t, ferryOpts{idleTimeout: 3 * time.Minute, maint: mm, startMode: poller.StartKeepAlive})
	ctx := context.Background()

	// agg-0 healthy, agg-1 table moved back, agg-2 table moved forward,
	// agg-3 workflow terminated with a dispatched row, agg-4 a dispatched
	// row its running workflow never heard of.
	e.commitN(t, 10, 5)
	waitFor(t, time.Minute, "every event published", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`) == 10
	})
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := e.db.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`UPDATE outbox_aggregates SET delivered_version = 0 WHERE aggregate_id = $1`, aggID(1))
	exec(`UPDATE outbox_aggregates SET last_version = 5, delivered_version = 5 WHERE aggregate_id = $1`, aggID(2))
	dispatchedUnseen := func(agg string) {
		exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, dispatched_at)
			VALUES ($1, $2, 'changed', '{}', 'dispatched', now() - interval '5 minutes')`, e.aggType, agg)
	}
	require.NoError(t, tclient.TerminateWorkflow(ctx, workflows.WorkflowID(e.aggType, aggID(3)), "", "drift test"))
	dispatchedUnseen(aggID(3))
	dispatchedUnseen(aggID(4))

	var res workflows.ReconcileResult
	runWorkflow(t, e, "reconcile-drift-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Hour, DriftGrace: time.Minute, DriftSettle: 200 * time.Millisecond}, &res)
	require.Zero(t, res.Redispatched, "nothing is an hour old")
	require.NotNil(t, res.Drift)
	require.Equal(t, 5, res.Drift.Sampled)
	require.Zero(t, res.Drift.Unchecked)

	got := map[string]string{}
	for _, d := range res.Drift.Drifted {
		require.NotContains(t, got, d.WorkflowID, "one kind per aggregate here: %+v", res.Drift.Drifted)
		got[d.WorkflowID] = d.Kind
		t.Logf("%s %s: %s; %s", d.WorkflowID, d.Kind, d.Differs, d.Action)
	}
	wf := func(i int) string { return workflows.WorkflowID(e.aggType, aggID(i)) }
	require.Equal(t, map[string]string{
		wf(1): workflows.DriftWorkflowAhead,
		wf(2): workflows.DriftWorkflowBehind,
		wf(3): workflows.DriftWorkflowGone,
		wf(4): workflows.DriftSignalLost,
	}, got)
	for _, d := range res.Drift.Drifted {
		switch d.Kind {
		case workflows.DriftWorkflowAhead:
			require.Contains(t, d.Differs, "has delivered 2, outbox_aggregates.delivered_version says 0")
		case workflows.DriftWorkflowBehind:
			require.Contains(t, d.Differs, "delivered_version is 5, the running workflow has delivered 2")
			require.Contains(t, d.Action, "temporal workflow terminate -w "+wf(2))
		case workflows.DriftWorkflowGone:
			require.Contains(t, d.Differs, "rows v3 are dispatched but the workflow is Terminated")
			require.Contains(t, d.Action, "the reconciler re-dispatches")
		case workflows.DriftSignalLost:
			require.Contains(t, d.Differs, "rows v3 are dispatched but the running workflow does not hold them")
		}
	}
	require.Equal(t, 5.0, ferrytest.Sample(t, reg, "ferry_drift_sampled_total", nil))
	require.Zero(t, ferrytest.Sample(t, reg, "ferry_drift_unchecked_total", nil))
	for _, kind := range []string{workflows.DriftWorkflowAhead, workflows.DriftWorkflowBehind, workflows.DriftWorkflowGone, workflows.DriftSignalLost} {
		require.Equal(t, 1.0, ferrytest.Sample(t, reg, "ferry_drift_found_total", map[string]string{"kind": kind}), kind)
	}

	// The reconciler repairs the orphaned row once it is old enough, and
	// the row dispatched before agg-4's running workflow started (to a run
	// that ended, as far as anyone can tell): the check then no longer
	// reports either aggregate.
	var again workflows.ReconcileResult
	runWorkflow(t, e, "reconcile-drift2-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Minute, DriftGrace: time.Minute, DriftSettle: 200 * time.Millisecond}, &again)
	require.ElementsMatch(t, []string{wf(3), wf(4)}, again.Aggregates)
	require.Equal(t, int64(2), again.Redispatched)
	require.NotNil(t, again.Drift)
	for _, d := range again.Drift.Drifted {
		require.NotContains(t, []string{wf(3), wf(4)}, d.WorkflowID, "repaired: %+v", d)
	}
}
