package workflows_test

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/workflows"
)

// historyFile was recorded from a real run by internal/tools/recordhistory:
// events signalled 2, 1, 1, 3, 5, 4, published in order, then idle
// completion. The workflow must keep replaying it; a change that does not is
// a non-deterministic change and needs workflow.GetVersion.
const historyFile = "testdata/aggregate_history.json"

func quietLogger() log.Logger { return log.NewStructuredLogger(slog.New(slog.DiscardHandler)) }

func TestReplayRecordedHistory(t *testing.T) {
	t.Parallel()
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(workflows.Aggregate, workflow.RegisterOptions{Name: workflows.AggregateWorkflowName})
	require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(quietLogger(), historyFile))
}

// The recording is worth replaying only if it holds what the recorder meant
// to record: out-of-order signals with a repeat, publishes in version order
// by a real server, idle completion.
func TestRecordedHistoryContents(t *testing.T) {
	t.Parallel()
	f, err := os.Open(historyFile)
	require.NoError(t, err)
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	require.NoError(t, err)

	dc := converter.GetDefaultDataConverter()
	var signalled, published []int64
	for _, ev := range h.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			var arg workflows.EventsSignalArg
			require.NoError(t, dc.FromPayloads(ev.GetWorkflowExecutionSignaledEventAttributes().GetInput(), &arg))
			for _, e := range arg.Events {
				signalled = append(signalled, e.Version)
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			attrs := ev.GetActivityTaskScheduledEventAttributes()
			require.Equal(t, workflows.PublishEventActivity, attrs.GetActivityType().GetName())
			var in workflows.PublishInput
			require.NoError(t, dc.FromPayloads(attrs.GetInput(), &in))
			published = append(published, in.Version)
		}
	}
	require.Equal(t, []int64{2, 1, 1, 3, 5, 4}, signalled)
	require.Equal(t, []int64{1, 2, 3, 4, 5}, published)
	events := h.GetEvents()
	require.Equal(t, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, events[len(events)-1].GetEventType())
}

// The replay above proves something only if a changed workflow fails it.
func TestReplayDetectsChangedWorkflow(t *testing.T) {
	t.Parallel()
	// Publishes before loading the cursor: its first command is an activity
	// where the history has the cursor's local-activity marker.
	changed := func(ctx workflow.Context, in workflows.AggregateInput) error {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		return workflow.ExecuteActivity(actx, workflows.PublishEventActivity, workflows.PublishInput{
			AggregateType: in.AggregateType, AggregateID: in.AggregateID, Version: 1,
		}).Get(ctx, nil)
	}
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: workflows.AggregateWorkflowName})
	err := r.ReplayWorkflowHistoryFromJSONFile(quietLogger(), historyFile)
	require.Error(t, err)
	// TMPRL1100 is the SDK's code for a non-determinism error.
	require.ErrorContains(t, err, "TMPRL1100")
}
