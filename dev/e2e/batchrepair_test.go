package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	batchpb "go.temporal.io/api/batch/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/workflows"
)

// batchSignal signals ferry.repair with req to every workflow the query
// finds, through Temporal's batch API (what `temporal workflow signal
// --query` does), and waits for the batch job; it returns how many
// workflows the job signalled.
func batchSignal(t *testing.T, query string, req workflows.RepairRequest) int64 {
	t.Helper()
	ctx := context.Background()
	input, err := converter.GetDefaultDataConverter().ToPayloads(req)
	require.NoError(t, err)
	jobID := uuid.NewString()
	_, err = tclient.WorkflowService().StartBatchOperation(ctx, &workflowservice.StartBatchOperationRequest{
		Namespace:       namespace,
		JobId:           jobID,
		Reason:          req.Reason,
		VisibilityQuery: query,
		Operation: &workflowservice.StartBatchOperationRequest_SignalOperation{SignalOperation: &batchpb.BatchOperationSignal{
			Signal: workflows.RepairSignal, Input: input, Identity: req.Actor,
		}},
	})
	require.NoError(t, err)
	var done *workflowservice.DescribeBatchOperationResponse
	waitFor(t, time.Minute, "batch job "+jobID, func() bool {
		d, err := tclient.WorkflowService().DescribeBatchOperation(ctx, &workflowservice.DescribeBatchOperationRequest{Namespace: namespace, JobId: jobID})
		if err != nil || d.State == enumspb.BATCH_OPERATION_STATE_RUNNING || d.State == enumspb.BATCH_OPERATION_STATE_UNSPECIFIED {
			return false
		}
		done = d
		return true
	})
	require.Equal(t, enumspb.BATCH_OPERATION_STATE_COMPLETED, done.State)
	require.Zero(t, done.FailureOperationCount)
	return done.CompleteOperationCount
}

func memo(t *testing.T, workflowID, key string) string {
	t.Helper()
	d, err := tclient.DescribeWorkflowExecution(context.Background(), workflowID, "")
	require.NoError(t, err)
	p, ok := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[key]
	if !ok {
		return ""
	}
	var s string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(p, &s))
	return s
}

// The runbook's batch repair (docs/runbook.md): one batch signal by query, with no event id
// and the error class it expects, repairs every aggregate blocked with that
// class, each at its own event, audited per event; a batch whose class
// does not match is rejected by each workflow, and the reason is on the
// workflow (its memo, in the UI and in history), not only in the query.
func TestBatchRepairByQuery(t *testing.T) {
	t.Parallel()
	e := setupPoison(t)
	a1 := e.mustCommit(t, "A", "poison")
	a2 := e.mustCommit(t, "A", "changed")
	b1 := e.mustCommit(t, "B", "poison")
	b2 := e.mustCommit(t, "B", "changed")
	wfA, wfB := workflows.WorkflowID(e.aggType, "A"), workflows.WorkflowID(e.aggType, "B")
	waitBlocked(t, wfA, a1)
	waitBlocked(t, wfB, b1)
	query := fmt.Sprintf("FerryBlocked = true AND FerryErrorClass = '%s' AND TaskQueue = '%s'", activities.ErrTypeUnroutable, e.taskQueue)
	waitFor(t, 30*time.Second, "both blocks in visibility", func() bool { return len(blockedIDs(t, fmt.Sprintf(" AND TaskQueue = '%s'", e.taskQueue))) == 2 })

	req := workflows.RepairRequest{RequestID: "batch-" + uuid.NewString(), Action: workflows.ActionRetry, ExpectErrorClass: activities.ErrTypeTooLarge,
		Actor: "ops", Reason: "queue bound"}
	require.Equal(t, int64(2), batchSignal(t, query, req))
	for _, wf := range []string{wfA, wfB} {
		waitFor(t, 30*time.Second, "the rejection in "+wf+"'s memo", func() bool {
			return memo(t, wf, workflows.MemoRepairRejected) != ""
		})
		require.Contains(t, memo(t, wf, workflows.MemoRepairRejected), "with error class Unroutable, not the expected PayloadTooLarge")
	}
	require.Zero(t, e.count(t, `SELECT count(*) FROM ferry_repairs`))

	e.br.Bind(t, e.aggType+".poison")
	req.RequestID, req.ExpectErrorClass = "batch-"+uuid.NewString(), activities.ErrTypeUnroutable
	require.Equal(t, int64(2), batchSignal(t, query, req))
	for _, id := range []string{a1, a2, b1, b2} {
		e.waitStatus(t, id, "published")
	}
	got := map[string][]string{}
	for _, m := range e.br.Collect(t, 4, time.Minute) {
		aggID, _ := m.Headers[broker.HeaderAggregateID].(string)
		got[aggID] = append(got[aggID], m.MessageId)
	}
	require.Equal(t, map[string][]string{"A": {a1, a2}, "B": {b1, b2}}, got, "both delivered, each in order")
	require.Equal(t, 2, e.count(t, `SELECT count(*) FROM ferry_repairs WHERE action = 'retry' AND request_id IN ($1, $2)`,
		req.RequestID+"/"+a1, req.RequestID+"/"+b1))
	waitFor(t, 30*time.Second, "no block left in visibility", func() bool { return len(blockedIDs(t, fmt.Sprintf(" AND TaskQueue = '%s'", e.taskQueue))) == 0 })
}
