package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/workflows"
)

// poisonEnv: the test queue is bound to "<type>.changed" only, so events of
// type "poison" are unroutable until a test binds that key too (the "fix
// downstream"). Two attempts each, so quarantine comes fast.
type poisonEnv struct {
	*env
	reg     *prometheus.Registry
	metrics *metrics.Metrics
}

// setupPoison runs Ferry in the workflow lane, or in the lane given.
func setupPoison(t *testing.T, lane ...string) *poisonEnv {
	t.Helper()
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	reg.MustRegister(metrics.NewOutboxCollector(e.db.Pool))
	o := ferryOpts{
		metrics:  m,
		policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 2}, "optional": {MaxAttempts: 1, OnPoison: workflows.OnPoisonSkip}},
	}
	if len(lane) > 0 {
		o.lane = lane[0]
	}
	e.startFerry(t, o)
	return &poisonEnv{env: e, reg: reg, metrics: m}
}

func (e *poisonEnv) mustCommit(t *testing.T, aggID, eventType string) string {
	t.Helper()
	id, err := e.commitType(context.Background(), aggID, eventType, false)
	require.NoError(t, err)
	return id
}

func (e *poisonEnv) status(t *testing.T, id string) (status, lastError string) {
	t.Helper()
	var le *string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(),
		`SELECT status, last_error FROM outbox_events WHERE id = $1`, id).Scan(&status, &le))
	if le != nil {
		lastError = *le
	}
	return status, lastError
}

func (e *poisonEnv) waitStatus(t *testing.T, id, want string) {
	t.Helper()
	waitFor(t, time.Minute, fmt.Sprintf("event %s to be %s", id, want), func() bool {
		s, _ := e.status(t, id)
		return s == want
	})
}

// forEachLane runs a test in the workflow lane and in the publish-first
// lane, each as a parallel subtest: what it checks must hold in both.
func forEachLane(t *testing.T, test func(t *testing.T, lane string)) {
	for _, lane := range []string{poller.LaneWorkflow, poller.LanePublishFirst} {
		t.Run(lane, func(t *testing.T) {
			t.Parallel()
			test(t, lane)
		})
	}
}

// blockedIDs lists the workflow IDs the Temporal UI's dead-letter view
// shows: FerryBlocked = true.
func blockedIDs(t *testing.T, extra string) []string {
	t.Helper()
	resp, err := tclient.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: namespace,
		Query:     "FerryBlocked = true" + extra,
	})
	require.NoError(t, err)
	var ids []string
	for _, ex := range resp.Executions {
		ids = append(ids, ex.Execution.WorkflowId)
	}
	return ids
}

// waitBlocked waits until the workflow itself reports being blocked at
// eventID (its state query), which is what a repair is validated against.
func waitBlocked(t *testing.T, workflowID, eventID string) {
	t.Helper()
	waitFor(t, 30*time.Second, "workflow "+workflowID+" blocked at "+eventID, func() bool {
		v, err := tclient.QueryWorkflow(context.Background(), workflowID, "", workflows.StateQuery)
		if err != nil {
			return false
		}
		var st workflows.State
		return v.Get(&st) == nil && st.Blocked != nil && st.Blocked.EventID == eventID
	})
}

func repair(t *testing.T, workflowID string, req workflows.RepairRequest) (workflows.RepairResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := tclient.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflowID,
		UpdateName:   workflows.RepairUpdate,
		Args:         []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return workflows.RepairResult{}, err
	}
	var res workflows.RepairResult
	err = h.Get(ctx, &res)
	return res, err
}

// A poison event blocks its own aggregate only; the block shows in the
// search attributes (the UI's dead-letter view), the outbox row and the
// metrics.
func TestPoisonEventBlocksOnlyItsAggregate(t *testing.T) {
	t.Parallel()
	forEachLane(t, func(t *testing.T, lane string) {
		e := setupPoison(t, lane)

		a1 := e.mustCommit(t, "A", "changed")
		a2 := e.mustCommit(t, "A", "poison")
		a3 := e.mustCommit(t, "A", "changed")
		e.waitStatus(t, a2, "quarantined")
		b1 := e.mustCommit(t, "B", "changed")
		c1 := e.mustCommit(t, "C", "changed")

		msgs := e.br.Collect(t, 3, time.Minute)
		got := map[string]bool{}
		for _, m := range msgs {
			got[m.MessageId] = true
		}
		require.Equal(t, map[string]bool{a1: true, b1: true, c1: true}, got, "A v1, B and C flow; A v2 and v3 wait")
		_, extra := e.br.Get(t, time.Second)
		require.False(t, extra, "nothing of A after its poison event")

		status, lastErr := e.status(t, a2)
		require.Equal(t, "quarantined", status)
		require.Contains(t, lastErr, activities.ErrTypeUnroutable)
		require.Contains(t, lastErr, e.aggType+".poison")
		status, _ = e.status(t, a3)
		require.NotEqual(t, "published", status)

		wfA := workflows.WorkflowID(e.aggType, "A")
		waitFor(t, 30*time.Second, "A in the dead-letter view", func() bool {
			ids := blockedIDs(t, fmt.Sprintf(" AND FerryBlockedEventId = '%s' AND FerryErrorClass = '%s'", a2, activities.ErrTypeUnroutable))
			return len(ids) == 1 && ids[0] == wfA
		})

		require.Equal(t, 1.0, e.metric(t, "ferry_events_quarantined_total", map[string]string{"event_type": "poison", "error_class": activities.ErrTypeUnroutable}))
		require.Equal(t, 1.0, e.metric(t, "ferry_outbox_events", map[string]string{"aggregate_type": e.aggType, "status": "quarantined"}))

		v, err := tclient.QueryWorkflow(context.Background(), wfA, "", workflows.StateQuery)
		require.NoError(t, err)
		var st workflows.State
		require.NoError(t, v.Get(&st))
		require.NotNil(t, st.Blocked)
		require.Equal(t, a2, st.Blocked.EventID)
		require.Equal(t, int64(1), st.Delivered)
		require.Equal(t, []int64{2, 3}, st.Pending)
	})
}

// retry (after fixing the cause), skip and patch through the update; a
// repeated request id does nothing twice; every repair is audited.
func TestRepairRetrySkipPatch(t *testing.T) {
	t.Parallel()
	forEachLane(t, func(t *testing.T, lane string) {
		e := setupPoison(t, lane)
		ctx := context.Background()

		a1 := e.mustCommit(t, "A", "poison")
		a2 := e.mustCommit(t, "A", "changed")
		d1 := e.mustCommit(t, "D", "poison")
		d2 := e.mustCommit(t, "D", "changed")
		e.waitStatus(t, a1, "quarantined")
		e.waitStatus(t, d1, "quarantined")
		wfA, wfD := workflows.WorkflowID(e.aggType, "A"), workflows.WorkflowID(e.aggType, "D")
		// The row is marked before the workflow takes up its blocked state.
		waitBlocked(t, wfA, a1)
		waitBlocked(t, wfD, d1)

		// Refused with a clear answer: wrong event, missing reason, bad patch.
		_, err := repair(t, wfA, workflows.RepairRequest{RequestID: "r0", Action: "retry", EventID: a2, Actor: "ops", Reason: "x"})
		require.ErrorContains(t, err, "is not the blocked event")
		_, err = repair(t, wfA, workflows.RepairRequest{RequestID: "r0", Action: "retry", EventID: a1, Actor: "ops"})
		require.ErrorContains(t, err, "reason is empty")
		_, err = repair(t, wfA, workflows.RepairRequest{RequestID: "r0", Action: "patch", EventID: a1, Actor: "ops", Reason: "fix", Payload: json.RawMessage(`{"note":"a\u0000b"}`)})
		require.ErrorContains(t, err, `Payload contains \u0000`)

		// patch with a valid payload: audited with both digests; still
		// unroutable, so it is quarantined again.
		res, err := repair(t, wfA, workflows.RepairRequest{RequestID: "patch-1", Action: "patch", EventID: a1, Actor: "ops", Reason: "fix the total", Payload: json.RawMessage(`{"total": 42}`)})
		require.NoError(t, err)
		require.Positive(t, res.AuditID)
		var before, after string
		require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT payload_sha256_before, payload_sha256_after FROM ferry_repairs WHERE request_id = 'patch-1'`).Scan(&before, &after))
		require.NotEqual(t, before, after)
		var total int
		require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT (payload->>'total')::int FROM outbox_events WHERE id = $1`, a1).Scan(&total))
		require.Equal(t, 42, total)
		waitFor(t, time.Minute, "A blocked again after the patched event still fails", func() bool {
			s, le := e.status(t, a1)
			return s == "quarantined" && le != ""
		})
		waitBlocked(t, wfA, a1)

		// Fix downstream, then retry: A v1 and v2 arrive in order.
		e.br.Bind(t, e.aggType+".poison")
		res, err = repair(t, wfA, workflows.RepairRequest{RequestID: "retry-1", Action: "retry", EventID: a1, Actor: "ops", Reason: "queue bound"})
		require.NoError(t, err)
		msgs := e.br.Collect(t, 2, time.Minute)
		require.Len(t, msgs, 2)
		require.Equal(t, a1, msgs[0].MessageId)
		require.Equal(t, a2, msgs[1].MessageId)
		require.JSONEq(t, `{"total": 42}`, string(msgs[0].Body), "the patched payload went out")

		// The same request id again: the earlier answer, nothing done twice.
		again, err := repair(t, wfA, workflows.RepairRequest{RequestID: "retry-1", Action: "retry", EventID: a1, Actor: "ops", Reason: "queue bound"})
		require.NoError(t, err)
		require.True(t, again.Duplicate)
		require.Equal(t, res.AuditID, again.AuditID)

		// skip D v1 by signal (the `temporal workflow signal` path): D v2 flows,
		// D v1 is marked skipped. D v1 is routable now, so skip before the
		// workflow's next attempt would matter: it is quarantined, not retried.
		require.NoError(t, tclient.SignalWorkflow(ctx, wfD, "", workflows.RepairSignal, workflows.RepairRequest{
			RequestID: "skip-1", Action: "skip", EventID: d1, Actor: "ops", Reason: "customer cancelled",
		}))
		e.waitStatus(t, d2, "published")
		status, _ := e.status(t, d1)
		require.Equal(t, "skipped", status)
		d := e.br.Collect(t, 1, time.Minute)
		require.Len(t, d, 1)
		require.Equal(t, d2, d[0].MessageId)

		type audit struct{ action, request string }
		rows, err := e.db.Pool.Query(ctx, `SELECT action, request_id FROM ferry_repairs ORDER BY id`)
		require.NoError(t, err)
		var audits []audit
		for rows.Next() {
			var a audit
			require.NoError(t, rows.Scan(&a.action, &a.request))
			audits = append(audits, a)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []audit{{"patch", "patch-1"}, {"retry", "retry-1"}, {"skip", "skip-1"}}, audits)

		// The audit trail is append-only.
		_, err = e.db.Pool.Exec(ctx, `DELETE FROM ferry_repairs`)
		require.ErrorContains(t, err, "append-only")
		waitFor(t, 30*time.Second, "no block left in visibility (it follows the run asynchronously)", func() bool {
			return len(blockedIDs(t, fmt.Sprintf(" AND WorkflowId = '%s'", wfA))) == 0
		})
	})
}

// An event type whose policy is skip is audited and passed over by Ferry
// itself; the aggregate does not block.
func TestSkipPolicy(t *testing.T) {
	t.Parallel()
	e := setupPoison(t)
	o := e.mustCommit(t, "A", "optional") // unroutable, policy skip
	n := e.mustCommit(t, "A", "changed")
	e.waitStatus(t, n, "published")
	status, _ := e.status(t, o)
	require.Equal(t, "skipped", status)
	var actor, reason string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(),
		`SELECT actor, reason FROM ferry_repairs WHERE event_id = $1 AND action = 'policy-skip'`, o).Scan(&actor, &reason))
	require.Equal(t, "ferry", actor)
	require.Contains(t, reason, "on_poison=skip")
}

// Replay re-publishes delivered events with their original message ids,
// audited; the same request again publishes nothing.
func TestReplayDeliveredEvents(t *testing.T) {
	t.Parallel()
	e := setupPoison(t)
	ids := []string{e.mustCommit(t, "R", "changed"), e.mustCommit(t, "R", "changed"), e.mustCommit(t, "S", "changed")}
	require.Len(t, e.br.Collect(t, 3, time.Minute), 3)
	for _, id := range ids {
		e.waitStatus(t, id, "published")
	}

	requestID := uuid.NewString()
	replay := func() {
		run, err := tclient.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
			ID: workflows.ReplayWorkflowID(requestID), TaskQueue: e.taskQueue,
		}, workflows.ReplayWorkflowName, workflows.ReplayInput{RequestID: requestID, EventIDs: ids, Reason: "consumer lost its state", Actor: "ops"})
		require.NoError(t, err)
		var res workflows.ReplayResult
		require.NoError(t, run.Get(context.Background(), &res))
		require.Equal(t, ids, res.Replayed)
	}
	replay()
	msgs := e.br.Collect(t, 3, time.Minute)
	require.Len(t, msgs, 3)
	for i, m := range msgs {
		require.Equal(t, ids[i], m.MessageId, "original message id")
	}
	require.Equal(t, 3, e.count(t, `SELECT count(*) FROM ferry_repairs WHERE action = 'replay' AND reason = 'consumer lost its state'`))

	replay()
	_, extra := e.br.Get(t, time.Second)
	require.False(t, extra, "a repeated replay request publishes nothing")
	require.Equal(t, 3, e.count(t, `SELECT count(*) FROM ferry_repairs WHERE action = 'replay'`))
}

// metric reads one sample of a counter or gauge from the test registry
// (0 when absent).
func (e *poisonEnv) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return ferrytest.Sample(t, e.reg, name, labels)
}

// What an operator types: `ferry blocked` shows the stuck aggregate with
// the command that repairs it; `ferry repair` applies it once.
func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	forEachLane(t, func(t *testing.T, lane string) {
		e := setupPoison(t, lane)
		id := e.mustCommit(t, "OPS", "poison")
		e.waitStatus(t, id, "quarantined")
		wf := workflows.WorkflowID(e.aggType, "OPS")
		waitFor(t, 30*time.Second, "the block in visibility", func() bool {
			return len(blockedIDs(t, fmt.Sprintf(" AND WorkflowId = '%s'", wf))) == 1
		})
		env := []string{"FERRY_POSTGRES_URL=" + e.db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporalAddr, "FERRY_TEMPORAL_NAMESPACE=" + namespace}

		code, out := ferry(t, env, "blocked")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, e.aggType+"/OPS  v1  event "+id+" (poison)")
		require.Contains(t, out, activities.ErrTypeUnroutable)
		require.Contains(t, out, "ferry repair "+id+" --action retry --reason")

		code, out = ferry(t, env, "repair", id, "--action", "patch", "--reason", "x", "--payload-file", "-")
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "Payload is empty")

		e.br.Bind(t, e.aggType+".poison")
		args := []string{"repair", id, "--action", "retry", "--reason", "queue bound", "--actor", "ops"}
		code, out = ferry(t, env, args...)
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "retry of event "+id+" ("+e.aggType+"/OPS v1) accepted, audit #")
		msgs := e.br.Collect(t, 1, time.Minute)
		require.Len(t, msgs, 1)
		require.Equal(t, id, msgs[0].MessageId)

		code, out = ferry(t, env, args...)
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "was applied before")
		code, out = ferry(t, env, "blocked")
		require.Equal(t, 0, code, out)
		require.NotContains(t, out, e.aggType+"/OPS")
	})
}
