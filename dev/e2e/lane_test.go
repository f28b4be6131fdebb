package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/workflows"
)

// The publish-first lane (poller.LanePublishFirst) against the real
// services: the relay publishes directly, hands an aggregate to its
// workflow on the aggregate's own failure, and takes it back when the run
// released it.

// laneOwner reads an aggregate's owner row; ok is false when none.
func (e *env) laneOwner(t *testing.T, aggID string) (relaydb.Owner, bool) {
	t.Helper()
	o, ok, err := relaydb.OwnerOf(context.Background(), e.db.Pool, e.aggType, aggID)
	require.NoError(t, err)
	return o, ok
}

// workflowStatus is the status of the aggregate workflow's latest run, or
// "" when it has none.
func (e *env) workflowStatus(t *testing.T, aggID string) (status enumspb.WorkflowExecutionStatus, runID string) {
	t.Helper()
	d, err := tclient.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(e.aggType, aggID), "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED, ""
	}
	require.NoError(t, err)
	return d.GetWorkflowExecutionInfo().GetStatus(), d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// Events that publish at their first attempt never touch Temporal: every
// one arrives, in version order, once, and no aggregate has a workflow.
func TestLanePublishesDirectlyWithoutWorkflows(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l, _ := e.consume(t)
	e.startFerry(t, ferryOpts{lane: poller.LanePublishFirst})
	e.commitN(t, 60, 6)
	waitFor(t, time.Minute, "60 events delivered", func() bool { return l.unique() == 60 })
	l.requireInOrder(t)
	waitFor(t, 10*time.Second, "every row marked", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published' AND owner_epoch > 0`) == 60
	})
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_owners`), "every relay gave its aggregates back")
	for i := range 6 {
		st, _ := e.workflowStatus(t, aggID(i))
		require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED, st, "aggregate %s has no workflow", aggID(i))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Zero(t, l.duplicates)
}

// An unroutable event hands its aggregate to its workflow, which retries
// it visibly (ferry.PublishEvent, attempts in the Temporal UI); a version
// committed meanwhile goes to the same run, after it; other aggregates keep
// being published directly; once the route exists the run publishes both,
// gives the aggregate back, and the next event is the lane's again.
func TestLaneHandsAFailingAggregateToItsWorkflowAndBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	l, _ := e.consume(t)
	e.startFerry(t, ferryOpts{lane: poller.LanePublishFirst, policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 1000}}})
	ctx := context.Background()

	v1, err := e.commitType(ctx, "A", "changed", false)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "v1 delivered", func() bool { return l.unique() == 1 })
	poison, err := e.commitType(ctx, "A", "poison", false)
	require.NoError(t, err)
	committedAt := time.Now()
	var owner relaydb.Owner
	waitFor(t, 30*time.Second, "A handed to its workflow", func() bool {
		o, ok := e.laneOwner(t, "A")
		owner = o
		return ok && o.Owner == relaydb.OwnerWorkflow
	})
	require.Equal(t, "Unroutable", owner.Cause)
	// The run retries the event on the regular path: a pending
	// ferry.PublishEvent, its attempts counting.
	waitRetrying(t, workflows.WorkflowID(e.aggType, "A"))
	listedAfter := time.Since(committedAt)
	t.Logf("the unroutable event's retrying activity was listed %s after its commit", listedAfter.Round(time.Millisecond))

	// `ferry status` shows the lane and the aggregate its workflow owns.
	code, out := ferry(t, []string{"FERRY_POSTGRES_URL=" + e.db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporalAddr,
		"FERRY_TEMPORAL_NAMESPACE=" + namespace, "FERRY_TASK_QUEUE=" + e.taskQueue}, "status")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "publish-first: 1 relay(s) registered")
	require.Contains(t, out, "in their workflows: 1 aggregate(s)")
	require.Contains(t, out, workflows.WorkflowID(e.aggType, "A")+"  Unroutable, epoch ")

	v3, err := e.commitType(ctx, "A", "changed", false) // committed while A is the workflow's
	require.NoError(t, err)
	for range 10 {
		_, err := e.commitType(ctx, "B", "changed", false)
		require.NoError(t, err)
	}
	waitFor(t, 30*time.Second, "B published directly meanwhile", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = 'B' AND status = 'published'`) == 10
	})
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'published'`, v3),
		"v3 waits behind the unroutable v2")
	st, runID := e.workflowStatus(t, "B")
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED, st, "B never had a workflow")
	require.Empty(t, runID)

	e.br.Bind(t, e.aggType+".poison") // the fix downstream
	waitFor(t, time.Minute, "v2 and v3 delivered", func() bool { return l.unique() == 13 })
	waitFor(t, 30*time.Second, "the run released A", func() bool {
		_, owned := e.laneOwner(t, "A")
		return !owned
	})
	var status enumspb.WorkflowExecutionStatus
	waitFor(t, 30*time.Second, "the run completed", func() bool {
		status, runID = e.workflowStatus(t, "A")
		return status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	var wfEpoch int64
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT owner_epoch FROM outbox_events WHERE id = $1`, poison).Scan(&wfEpoch))
	require.Equal(t, owner.Epoch, wfEpoch, "the run marked under its epoch")

	v4, err := e.commitType(ctx, "A", "changed", false)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "v4 delivered", func() bool { return l.unique() == 14 })
	var v4Epoch int64
	waitFor(t, 10*time.Second, "v4 marked", func() bool {
		return e.db.Pool.QueryRow(ctx, `SELECT coalesce(owner_epoch, 0) FROM outbox_events WHERE id = $1 AND status = 'published'`, v4).Scan(&v4Epoch) == nil
	})
	require.Greater(t, v4Epoch, wfEpoch, "v4 went out under a newer epoch: the lane's")
	st, again := e.workflowStatus(t, "A")
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, st)
	require.Equal(t, runID, again, "no new run for A: the lane published v4")
	l.requireInOrder(t)
	_ = v1
}

// Each failure of an aggregate's own publish hands it to its workflow,
// with the broker's answer as the cause, and the run goes on as the
// workflow lane would: a retryable failure (unroutable, nacked) is retried
// visibly, a permanent one (too large, refused by the broker) is
// quarantined at once and blocks only its aggregate. A healthy aggregate
// is published directly before and after.
func TestLaneHandsOverOnEveryFailureClass(t *testing.T) {
	t.Parallel()
	tests := []struct {
		class string
		// prepare sets the env up so that events of type "bad" fail
		// with the class; it returns the ferry options.
		prepare   func(t *testing.T, e *env) ferryOpts
		permanent bool
	}{
		{class: "Unroutable", prepare: func(t *testing.T, e *env) ferryOpts {
			e.br.Unbind(t, "#")
			e.br.Bind(t, e.aggType+".changed")
			return ferryOpts{}
		}},
		{class: "Nacked", prepare: func(t *testing.T, e *env) ferryOpts {
			// A full queue that rejects new messages: the broker nacks.
			e.br.Unbind(t, "#")
			e.br.Bind(t, e.aggType+".changed")
			full := ferrytest.Name("full")
			ch := e.br.Channel(t)
			_, err := ch.QueueDeclare(full, false, true, false, false, amqp.Table{"x-max-length": 0, "x-overflow": "reject-publish"})
			require.NoError(t, err)
			require.NoError(t, ch.QueueBind(full, e.aggType+".bad", e.br.Exchange, false, nil))
			return ferryOpts{}
		}},
		{class: "PayloadTooLarge", permanent: true, prepare: func(t *testing.T, e *env) ferryOpts {
			return ferryOpts{maxMessageBytes: 100}
		}},
		{class: "MessageRefused", permanent: true, prepare: func(t *testing.T, e *env) ferryOpts {
			return ferryOpts{} // a node whose max_message_size is below the publisher's limit: see below
		}},
	}
	for _, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			t.Parallel()
			var e *env
			if tt.class == "MessageRefused" {
				node := servers.StartRabbitNode(t, "max_message_size = 1024")
				e = setupOn(t, ferrytest.NewDB(t, ""), ferrytest.NewBroker(t, node.URL))
			} else {
				e = setup(t)
			}
			o := tt.prepare(t, e)
			o.lane = poller.LanePublishFirst
			o.policies = map[string]workflows.EventPolicy{"*": {MaxAttempts: 1000}}
			ctx := context.Background()
			l, _ := e.consume(t)
			e.startFerry(t, o)
			_, err := e.commitType(ctx, "ok", "changed", false)
			require.NoError(t, err)
			waitFor(t, 30*time.Second, "the healthy aggregate's first event", func() bool { return l.unique() == 1 })

			bad := e.commitLarge(t, "X", "bad", tt.class == "PayloadTooLarge" || tt.class == "MessageRefused")
			var owner relaydb.Owner
			waitFor(t, 30*time.Second, "X handed to its workflow", func() bool {
				o, ok := e.laneOwner(t, "X")
				owner = o
				return ok && o.Owner == relaydb.OwnerWorkflow
			})
			require.Equal(t, tt.class, owner.Cause)
			if tt.permanent {
				waitFor(t, 30*time.Second, "the event quarantined and its aggregate blocked", func() bool {
					var status, class string
					require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT status, coalesce(last_error_class, '') FROM outbox_events WHERE id = $1`, bad).Scan(&status, &class))
					return status == "quarantined" && class == tt.class
				})
				waitBlocked(t, workflows.WorkflowID(e.aggType, "X"), bad)
			} else {
				waitRetrying(t, workflows.WorkflowID(e.aggType, "X"))
			}
			_, err = e.commitType(ctx, "ok", "changed", false)
			require.NoError(t, err)
			waitFor(t, time.Minute, "the healthy aggregate's second event, published directly", func() bool { return l.unique() == 2 })
			st, _ := e.workflowStatus(t, "ok")
			require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED, st, "the healthy aggregate never had a workflow")
		})
	}
}

// commitLarge commits an event whose payload is over 2 KiB when large.
func (e *env) commitLarge(t *testing.T, aggID, eventType string, large bool) string {
	t.Helper()
	payload := []byte(`{}`)
	if large {
		payload = []byte(`{"blob":"` + strings.Repeat("x", 2048) + `"}`)
	}
	id := uuid.Must(uuid.NewV7())
	ctx := context.Background()
	tx, err := e.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = e.writer.Write(ctx, tx, outbox.Event{ID: id, AggregateType: e.aggType, AggregateID: aggID, EventType: eventType, Payload: payload})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return id.String()
}

// A run whose aggregate was handed on under a newer epoch while it
// retried (here: the epoch moved by hand, as the reconciler or a new
// handoff would) gets nothing marked: its publish is refused before it is
// sent, and the run fails, saying why, instead of waiting for versions
// someone else publishes. The reconciler then takes the aggregate back,
// and the lane publishes the event.
func TestLaneRunThatLostItsEpochFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	l, _ := e.consume(t)
	e.startFerry(t, ferryOpts{lane: poller.LanePublishFirst, policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 1000}}})
	ctx := context.Background()
	poison, err := e.commitType(ctx, "A", "poison", false)
	require.NoError(t, err)
	var owner relaydb.Owner
	waitFor(t, 30*time.Second, "A handed to its workflow", func() bool {
		o, ok := e.laneOwner(t, "A")
		owner = o
		return ok && o.Owner == relaydb.OwnerWorkflow
	})
	wf := workflows.WorkflowID(e.aggType, "A")
	// Between two attempts (the next comes a second or more later), so
	// that the next one checks the owner before it sends: a check and a
	// send are not atomic, the fenced mark is what guards.
	waitRetrying(t, wf)
	_, err = e.db.Pool.Exec(ctx, `UPDATE outbox_owners SET epoch = nextval('ferry_owner_epoch') WHERE aggregate_type = $1 AND aggregate_id = 'A'`, e.aggType)
	require.NoError(t, err)
	e.br.Bind(t, e.aggType+".poison") // the run's next attempt would succeed
	waitFor(t, time.Minute, "the run failed", func() bool {
		st, _ := e.workflowStatus(t, "A")
		return st == enumspb.WORKFLOW_EXECUTION_STATUS_FAILED
	})
	run := tclient.GetWorkflow(ctx, wf, "")
	err = run.Get(ctx, nil)
	require.ErrorContains(t, err, "not owned by this run under epoch")
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'published'`, poison), "nothing marked")
	require.Zero(t, l.unique(), "nothing published by the run that lost the aggregate")

	var res workflows.ReconcileResult
	runWorkflow(t, e, "reconcile-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Millisecond, DriftSample: -1}, &res)
	require.Equal(t, []string{wf}, res.TakenBack)
	waitFor(t, 30*time.Second, "the event published by the lane", func() bool { return l.unique() == 1 })
	var epoch int64
	waitFor(t, 10*time.Second, "the row marked", func() bool {
		return e.db.Pool.QueryRow(ctx, `SELECT owner_epoch FROM outbox_events WHERE id = $1 AND status = 'published'`, poison).Scan(&epoch) == nil
	})
	require.Greater(t, epoch, owner.Epoch)
	_, owned := e.laneOwner(t, "A")
	require.False(t, owned)
}

// A run terminated while its workflow owns the aggregate never releases
// it: the drift check reports the workflow-owned aggregate with no run,
// and the reconciler gives it back to the lane with the rows dispatched to
// the run, which the lane then publishes directly, in order.
func TestLaneReconcilerTakesBackFromATerminatedRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	l, _ := e.consume(t)
	e.startFerry(t, ferryOpts{lane: poller.LanePublishFirst, policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 1000}}})
	ctx := context.Background()
	first, err := e.commitType(ctx, "A", "poison", false)
	require.NoError(t, err)
	second, err := e.commitType(ctx, "A", "changed", false)
	require.NoError(t, err)
	wf := workflows.WorkflowID(e.aggType, "A")
	waitFor(t, 30*time.Second, "both rows dispatched to A's workflow", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = 'A' AND status = 'dispatched'`) == 2
	})
	require.NoError(t, tclient.TerminateWorkflow(ctx, wf, "", "lane test: a run that never releases"))
	e.br.Bind(t, e.aggType+".poison")

	// Owned for less than OlderThan: not taken back yet, but drift.
	var look workflows.ReconcileResult
	runWorkflow(t, e, "drift-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Hour, DriftSample: 50, DriftGrace: time.Millisecond, DriftSettle: 100 * time.Millisecond}, &look)
	require.Empty(t, look.TakenBack)
	require.NotNil(t, look.Drift)
	var kinds []string
	for _, d := range look.Drift.Drifted {
		if d.WorkflowID == wf {
			kinds = append(kinds, d.Kind)
		}
	}
	require.Contains(t, kinds, workflows.DriftOwnerWithoutRun, "the drift check names the owner without a run: %+v", look.Drift.Drifted)

	var res workflows.ReconcileResult
	runWorkflow(t, e, "reconcile-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Millisecond, DriftSample: -1}, &res)
	require.Equal(t, []string{wf}, res.TakenBack)
	waitFor(t, 30*time.Second, "both events delivered", func() bool { return l.unique() == 2 })
	l.requireInOrder(t)
	for _, id := range []string{first, second} {
		waitFor(t, 10*time.Second, "marked by the lane", func() bool {
			return e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'published' AND owner_epoch > 0`, id) == 1
		})
	}
	_, owned := e.laneOwner(t, "A")
	require.False(t, owned)
}

// A poller of the workflow lane and one of the publish-first lane on one
// outbox would both publish an aggregate: the second to start is refused,
// naming the first, through the binary as in a library.
func TestLaneRefusesAMixedFleet(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	first := e.startProcess(t, "poller") // the workflow lane
	waitFor(t, 30*time.Second, "the first poller registered", func() bool {
		return e.count(t, `SELECT count(*) FROM ferry_relays WHERE lane = 'workflow'`) == 1
	})
	second := e.startProcess(t, "poller", "FERRY_LANE=publish-first")
	second.waitExit(t, time.Minute)
	out := second.out.String()
	require.Error(t, second.err)
	require.Contains(t, out, "runs the workflow lane")
	require.Contains(t, out, "every relay of one outbox must run the same lane")

	// In a library: the same refusal, as an error value.
	target, err := rabbitmq.New(rabbitmq.Config{Publisher: mustPublisher(t, e)})
	require.NoError(t, err)
	p, err := poller.New(poller.Config{Pool: e.db.Pool, Temporal: tclient, TaskQueue: e.taskQueue, Name: "lane-in-process",
		Lane: poller.LanePublishFirst, Target: target})
	require.NoError(t, err)
	err = p.Start(ctx)
	var mixed *poller.MixedFleetError
	require.ErrorAs(t, err, &mixed)
	require.Equal(t, poller.LaneWorkflow, mixed.OtherLane)

	// Once the workflow lane's poller stopped, the lane starts.
	first.stop(t)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(p.Stop)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM ferry_relays WHERE lane = 'publish-first'`))
}

func mustPublisher(t *testing.T, e *env) *broker.Publisher {
	t.Helper()
	pub, err := broker.New(broker.Config{URL: e.br.URL, Exchange: e.br.Exchange})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// Switching lanes, both ways, as the lanes page says: stop every relay of
// one lane, start the other's. A run of the workflow lane that is blocked
// when the publish-first lane starts keeps its rows, and the lane waits
// behind them (it never publishes past a version a run holds); once the
// run is repaired it publishes them and the lane goes on. Back in the
// workflow lane, an aggregate its workflow owns under an epoch keeps its
// run, which takes the workflow lane's signals. Every event arrives, in
// order.
func TestLaneSwitchBothWays(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	l, _ := e.consume(t)
	ctx := context.Background()
	// poison blocks after two attempts; flaky is retried until it goes.
	policy := "FERRY_POLICY=*:max-attempts=2;flaky:max-attempts=1000"
	mustCommit := func(aggID, eventType string) string {
		t.Helper()
		id, err := e.commitType(ctx, aggID, eventType, false)
		require.NoError(t, err)
		return id
	}

	// The workflow lane: A blocks at v2; v3 is dispatched to the blocked run.
	wfLane := e.startProcess(t, "run", policy)
	mustCommit("A", "changed")
	poison := mustCommit("A", "poison")
	mustCommit("A", "changed")
	mustCommit("B", "changed")
	waitBlocked(t, workflows.WorkflowID(e.aggType, "A"), poison)
	waitFor(t, 30*time.Second, "A's v3 dispatched to the blocked run and B delivered", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = 'A' AND aggregate_version = 3 AND status = 'dispatched'`) == 1 &&
			l.unique() == 2
	})
	wfLane.stop(t)

	// The publish-first lane: A's v4 waits behind the run's v2 and v3.
	lane := e.startProcess(t, "run", policy, "FERRY_LANE=publish-first")
	mustCommit("A", "changed")
	for range 3 {
		mustCommit("B", "changed")
	}
	waitFor(t, 30*time.Second, "B published directly", func() bool { return l.unique() == 5 })
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = 'A' AND aggregate_version = 4 AND status = 'published'`),
		"v4 is not published past the blocked run's v2")
	e.br.Bind(t, e.aggType+".poison")
	res, err := repair(t, workflows.WorkflowID(e.aggType, "A"), workflows.RepairRequest{RequestID: "switch-1", Action: "retry", EventID: poison, Actor: "ops", Reason: "queue bound"})
	require.NoError(t, err)
	require.Positive(t, res.AuditID)
	waitFor(t, time.Minute, "A's v2-v4 delivered", func() bool { return l.unique() == 8 })
	waitFor(t, 10*time.Second, "v4 marked published by the lane (under an epoch)", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = 'A' AND aggregate_version = 4 AND status = 'published' AND owner_epoch > 0`) == 1
	})

	// An aggregate handed to its workflow, still failing when the lane stops.
	c1 := mustCommit("C", "flaky")
	waitFor(t, 30*time.Second, "C handed to its workflow", func() bool {
		o, ok := e.laneOwner(t, "C")
		return ok && o.Owner == relaydb.OwnerWorkflow
	})
	lane.stop(t)

	// Back to the workflow lane: C's next event goes to the run that owns C.
	e.startProcess(t, "run", policy)
	mustCommit("C", "changed")
	e.br.Bind(t, e.aggType+".flaky")
	waitFor(t, 2*time.Minute, "C's events delivered", func() bool { return l.unique() == 10 })
	l.requireInOrder(t)
	l.mu.Lock()
	dups := l.duplicates
	l.mu.Unlock()
	t.Logf("switched lanes twice: 10 events delivered in order, %d duplicate copies; C's first event %s", dups, c1)
}

// waitRetrying waits until the workflow's publish activity is retrying
// (ferry.PublishEvent pending at its second attempt or later): what the
// Temporal UI shows for an event that keeps failing.
func waitRetrying(t *testing.T, workflowID string) {
	t.Helper()
	waitFor(t, 30*time.Second, workflowID+"'s retrying publish activity", func() bool {
		d, err := tclient.DescribeWorkflowExecution(context.Background(), workflowID, "")
		if err != nil {
			return false
		}
		for _, a := range d.GetPendingActivities() {
			if a.GetActivityType().GetName() == workflows.PublishEventActivity && a.GetAttempt() >= 2 {
				return true
			}
		}
		return false
	})
}

// An aggregate whose relays keep dying while they hold it (their leases
// run out: here, as after two such deaths, a third expired lease) goes to
// its workflow at the third takeover, cause RelayCrashed: an event that
// kills its relay is retried where Temporal counts the attempts, not
// claimed by one relay after another for ever.
func TestLaneHandsOverAnAggregateWhoseRelaysKeepDying(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l, _ := e.consume(t)
	ctx := context.Background()
	id, err := e.commitType(ctx, "A", "changed", false)
	require.NoError(t, err)
	_, err = e.db.Pool.Exec(ctx, `INSERT INTO outbox_owners (aggregate_type, aggregate_id, owner, epoch, holder, lease_until, takeovers)
		VALUES ($1, 'A', 'relay', nextval('ferry_owner_epoch'), 'dead-relay', now() - interval '1 second', 2)`, e.aggType)
	require.NoError(t, err)
	e.startFerry(t, ferryOpts{lane: poller.LanePublishFirst})
	waitFor(t, 30*time.Second, "A's event published by its workflow", func() bool { return l.unique() == 1 })
	var epoch int64
	waitFor(t, 10*time.Second, "the row marked", func() bool {
		return e.db.Pool.QueryRow(ctx, `SELECT owner_epoch FROM outbox_events WHERE id = $1 AND status = 'published'`, id).Scan(&epoch) == nil
	})
	st, _ := e.workflowStatus(t, "A")
	require.NotEqual(t, enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED, st, "A went to its workflow")
	run := tclient.GetWorkflow(ctx, workflows.WorkflowID(e.aggType, "A"), "")
	var in workflows.AggregateInput
	iter := tclient.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	first, err := iter.Next()
	require.NoError(t, err)
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(first.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in))
	require.Equal(t, poller.CauseRelayCrashed, in.HandoffCause)
	e.requireLaneEmpty(t, 30*time.Second)
}
