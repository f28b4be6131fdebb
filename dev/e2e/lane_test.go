package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/workflows"
)

// The publish-first lane (poller.LanePublishFirst) against the real
// services: the relay publishes directly, hands an aggregate to its
// workflow on the aggregate's own failure, and takes it back when the run
// released it.

// laneOwner reads an aggregate's owner row; ok is false when none.
func (e *env) laneOwner(t *testing.T, aggID string) (outbox.Owner, bool) {
	t.Helper()
	o, ok, err := outbox.OwnerOf(context.Background(), e.db.Pool, e.aggType, aggID)
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
	var owner outbox.Owner
	waitFor(t, 30*time.Second, "A handed to its workflow", func() bool {
		o, ok := e.laneOwner(t, "A")
		owner = o
		return ok && o.Owner == outbox.OwnerWorkflow
	})
	require.Equal(t, "Unroutable", owner.Cause)
	// The run retries the event on the regular path: a pending
	// ferry.PublishEvent, its attempts counting.
	var listedAfter time.Duration
	waitFor(t, 30*time.Second, "the run's retrying publish activity", func() bool {
		d, err := tclient.DescribeWorkflowExecution(ctx, workflows.WorkflowID(e.aggType, "A"), "")
		if err != nil {
			return false
		}
		for _, a := range d.GetPendingActivities() {
			if a.GetActivityType().GetName() == workflows.PublishEventActivity && a.GetAttempt() >= 2 {
				listedAfter = time.Since(committedAt)
				return true
			}
		}
		return false
	})
	t.Logf("the unroutable event's retrying activity was listed %s after its commit", listedAfter.Round(time.Millisecond))

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
