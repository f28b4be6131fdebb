package workflows_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/workflows"
)

// The histories were recorded from real runs by dev/tools/recordhistory
// (-scenario NAME for testdata/NAME_history.json). The workflow must keep
// replaying them; a change that does not is a non-deterministic change and
// needs a new revision or workflow.GetVersion (the package doc says which).
const (
	// historyFile: events signalled 2, 1, 1, 3, 5, 4, published in order,
	// then idle completion.
	historyFile = "testdata/aggregate_history.json"
	// quarantineHistoryFile: events 1 to 3 signalled; evt-2 fails with a
	// retryable "Unroutable" under a policy of two attempts and is
	// quarantined (search attributes upserted); event 4 arrives while it is
	// blocked; a retry repair by update lets it through; 3 and 4 follow;
	// idle completion.
	quarantineHistoryFile = "testdata/quarantine_history.json"
	// batchHistoryFile: the fast path. Events 1-5 in one signal, published
	// by local activities (1-3 in one batch; evt-4's batch fails, its
	// regular attempt fails once and the retry succeeds; 5 alone), then 7
	// (a gap) and 6, published in one batch; one idle timer across the
	// signals, a second for the rest of the idle time; idle completion.
	batchHistoryFile = "testdata/batch_history.json"
	// oneShotHistoryFile: the current revision as pollers start a new
	// aggregate: an eager one-shot start with one event in the input,
	// published by one local activity that also read the cursor, completed
	// in the first workflow task.
	oneShotHistoryFile = "testdata/oneshot_history.json"
	// oneShotGapHistoryFile: a one-shot run with events 1 and 3 in its
	// input publishes 1, waits for 2, gets 2 and a repeated 3 by signal,
	// publishes them in one batch and completes; no timer.
	oneShotGapHistoryFile = "testdata/oneshot_gap_history.json"
	// r2OneShotHistoryFile: oneShotHistoryFile at Revision2: no settings in
	// the input; the one batch answers with the worker's.
	r2OneShotHistoryFile = "testdata/r2_oneshot_history.json"
	// r2KeepAliveHistoryFile: a Signal-With-Start of Revision2 with 1-3;
	// evt-1's batch fails, so the cursor read answers with the worker's
	// settings (batch size 2, idle 2s); evt-1 goes the regular way, 2-3 in
	// one batch; idle completion on the worker's 2s.
	r2KeepAliveHistoryFile = "testdata/r2_keepalive_history.json"
	// r2ResumedHistoryFile: the last run of a Revision2 aggregate that
	// continued as new (its worker: 20 history events, no fast path): it
	// asks its worker with a cursor read first, publishes the rest one by
	// one, idles and completes.
	r2ResumedHistoryFile = "testdata/r2_resumed_history.json"
	// r3HandoffHistoryFile: the publish-first lane hands an aggregate to a
	// Revision3 run (epoch 7) with 1 and 2 in its input: a cursor read,
	// evt-1 the regular way (one failed attempt), 2 in a batch; releases
	// that answer Busy while 3 and then 4 arrive by signal; a release that
	// answers Released, and completion.
	r3HandoffHistoryFile = "testdata/r3_handoff_history.json"
	// r3AdoptHistoryFile: a Revision2 run without an epoch publishes 1 and
	// idles; a handoff signal of epoch 9 with evt-2 makes it the owner: it
	// reads its cursor, publishes evt-2 the regular way under epoch 9 and
	// releases instead of idling out.
	r3AdoptHistoryFile = "testdata/r3_adopt_history.json"
)

var recordedHistories = []string{historyFile, quarantineHistoryFile, batchHistoryFile, oneShotHistoryFile, oneShotGapHistoryFile,
	r2OneShotHistoryFile, r2KeepAliveHistoryFile, r2ResumedHistoryFile, r3HandoffHistoryFile, r3AdoptHistoryFile}

// The lane's recordings hold what they were recorded for: the activities
// in the order the lane's runs call them, each under the run's epoch.
func TestRecordedLaneHistoryContents(t *testing.T) {
	t.Parallel()
	dc := converter.GetDefaultDataConverter()
	activities := func(file string) (names []string, epochs []int64) {
		for _, ev := range loadHistory(t, file) {
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				attrs := ev.GetActivityTaskScheduledEventAttributes()
				names = append(names, attrs.GetActivityType().GetName())
				var in struct {
					Epoch int64 `json:"epoch"`
				}
				require.NoError(t, dc.FromPayloads(attrs.GetInput(), &in))
				epochs = append(epochs, in.Epoch)
			case enumspb.EVENT_TYPE_MARKER_RECORDED:
				names = append(names, "marker")
			}
		}
		return names, epochs
	}
	names, epochs := activities(r3HandoffHistoryFile)
	require.Equal(t, []string{"marker", workflows.PublishEventActivity, "marker", workflows.ReleaseAggregateActivity, "marker",
		workflows.ReleaseAggregateActivity, "marker", workflows.ReleaseAggregateActivity}, names,
		"cursor read, evt-1 regular, 2 in a batch, Busy, 3 in a batch, Busy, 4 in a batch, Released")
	for _, e := range epochs {
		require.Equal(t, int64(7), e)
	}
	names, epochs = activities(r3AdoptHistoryFile)
	require.Equal(t, []string{"marker", "marker", workflows.PublishEventActivity, workflows.ReleaseAggregateActivity}, names,
		"1 in a batch; after the handoff signal a cursor read, evt-2 regular, the release")
	require.Equal(t, []int64{9, 9}, epochs)
}

func quietLogger() log.Logger { return log.NewStructuredLogger(slog.New(slog.DiscardHandler)) }

func TestReplayRecordedHistory(t *testing.T) {
	t.Parallel()
	for _, file := range recordedHistories {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(workflows.Aggregate, workflow.RegisterOptions{Name: workflows.AggregateWorkflowName})
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(quietLogger(), file))
		})
	}
}

func loadHistory(t *testing.T, file string) []*historypb.HistoryEvent {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	require.NoError(t, err)
	events := h.GetEvents()
	require.NotEmpty(t, events)
	require.Equal(t, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, events[len(events)-1].GetEventType())
	return events
}

// The recording is worth replaying only if it holds what the recorder meant
// to record: out-of-order signals with a repeat, publishes in version order
// by a real server, idle completion.
func TestRecordedHistoryContents(t *testing.T) {
	t.Parallel()
	dc := converter.GetDefaultDataConverter()
	var signalled, published []int64
	for _, ev := range loadHistory(t, historyFile) {
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
}

// The quarantine recording holds a quarantine and a repair by a real
// server: bounded attempts, the quarantine activity, search attributes set
// and cleared, a signal taken in while blocked, an accepted and completed
// repair update, then the rest in order.
func TestQuarantineHistoryContents(t *testing.T) {
	t.Parallel()
	dc := converter.GetDefaultDataConverter()
	var (
		steps        []string // what happened, in order
		lastAttempt  int32
		failedOnce   bool
		blockedFlags []bool
	)
	for _, ev := range loadHistory(t, quarantineHistoryFile) {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			attrs := ev.GetWorkflowExecutionSignaledEventAttributes()
			require.Equal(t, workflows.EventsSignal, attrs.GetSignalName())
			var arg workflows.EventsSignalArg
			require.NoError(t, dc.FromPayloads(attrs.GetInput(), &arg))
			var vs []string
			for _, e := range arg.Events {
				vs = append(vs, fmt.Sprint(e.Version))
			}
			steps = append(steps, "signal "+strings.Join(vs, ","))
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			attrs := ev.GetActivityTaskScheduledEventAttributes()
			switch name := attrs.GetActivityType().GetName(); name {
			case workflows.PublishEventActivity:
				var in workflows.PublishInput
				require.NoError(t, dc.FromPayloads(attrs.GetInput(), &in))
				steps = append(steps, fmt.Sprintf("publish v%d", in.Version))
			case workflows.QuarantineActivity:
				var in workflows.QuarantineInput
				require.NoError(t, dc.FromPayloads(attrs.GetInput(), &in))
				steps = append(steps, fmt.Sprintf("quarantine %s %s", in.EventID, in.ErrorClass))
			case workflows.RepairActivity:
				var in workflows.RepairInput
				require.NoError(t, dc.FromPayloads(attrs.GetInput(), &in))
				steps = append(steps, fmt.Sprintf("repair %s %s v%d", in.Request.Action, in.Request.EventID, in.Version))
			default:
				require.Failf(t, "unexpected activity", "%s", name)
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			lastAttempt = ev.GetActivityTaskStartedEventAttributes().GetAttempt()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			require.False(t, failedOnce, "more than one activity failed")
			failedOnce = true
			f := ev.GetActivityTaskFailedEventAttributes().GetFailure()
			require.Equal(t, "Unroutable", f.GetApplicationFailureInfo().GetType())
			require.Equal(t, int32(2), lastAttempt, "the policy allows two attempts")
		case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			fields := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
			var blocked bool
			require.NoError(t, dc.FromPayload(fields[workflows.SABlocked], &blocked))
			blockedFlags = append(blockedFlags, blocked)
			steps = append(steps, fmt.Sprintf("%s=%t", workflows.SABlocked, blocked))
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			req := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput()
			require.Equal(t, workflows.RepairUpdate, req.GetName())
			steps = append(steps, "update accepted")
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
			outcome := ev.GetWorkflowExecutionUpdateCompletedEventAttributes().GetOutcome()
			require.Nil(t, outcome.GetFailure())
			var res workflows.RepairResult
			require.NoError(t, dc.FromPayloads(outcome.GetSuccess(), &res))
			require.Equal(t, workflows.ActionRetry, res.Action)
			require.Equal(t, "evt-2", res.EventID)
			require.NotZero(t, res.AuditID)
			steps = append(steps, "update completed")
		}
	}
	require.True(t, failedOnce)
	require.Equal(t, []bool{true, false}, blockedFlags)
	require.Equal(t, []string{
		"signal 1,2,3",
		"publish v1",
		"publish v2",
		"quarantine evt-2 Unroutable",
		"FerryBlocked=true",
		"signal 4",
		"update accepted",
		"repair retry evt-2 v2",
		"update completed",
		"FerryBlocked=false",
		"publish v2",
		"publish v3",
		"publish v4",
	}, steps)
}

// The fast-path recording: local-activity markers for the batches, one
// regular activity (with a failed attempt and its retry) for evt-4, the
// idle timer that signals do not cancel.
func TestBatchHistoryContents(t *testing.T) {
	t.Parallel()
	dc := converter.GetDefaultDataConverter()
	var markers []string
	var regular []int64
	var attempts []int32
	var timers []enumspb.EventType
	for _, ev := range loadHistory(t, batchHistoryFile) {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			markers = append(markers, ev.GetMarkerRecordedEventAttributes().GetMarkerName())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			attrs := ev.GetActivityTaskScheduledEventAttributes()
			require.Equal(t, workflows.PublishEventActivity, attrs.GetActivityType().GetName())
			var in workflows.PublishInput
			require.NoError(t, dc.FromPayloads(attrs.GetInput(), &in))
			regular = append(regular, in.Version)
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			attempts = append(attempts, ev.GetActivityTaskStartedEventAttributes().GetAttempt())
		case enumspb.EVENT_TYPE_TIMER_STARTED, enumspb.EVENT_TYPE_TIMER_FIRED, enumspb.EVENT_TYPE_TIMER_CANCELED:
			timers = append(timers, ev.GetEventType())
		}
	}
	// cursor, batch 1-3, failed batch at 4, batch 5, batch 6-7
	require.Equal(t, []string{"LocalActivity", "LocalActivity", "LocalActivity", "LocalActivity", "LocalActivity"}, markers)
	require.Equal(t, []enumspb.EventType{
		enumspb.EVENT_TYPE_TIMER_STARTED, enumspb.EVENT_TYPE_TIMER_FIRED, // signals 7 and 6 came meanwhile
		enumspb.EVENT_TYPE_TIMER_STARTED, enumspb.EVENT_TYPE_TIMER_FIRED,
	}, timers)
	require.Equal(t, []int64{4}, regular)
	require.Equal(t, []int32{2}, attempts, "the started event records the attempt that succeeded")
}

// The one-shot recordings are what a new aggregate costs: an eager start,
// one workflow task, one local-activity marker per batch (the cursor read
// with the first), no timer, no cursor activity of its own.
func TestOneShotHistoryContents(t *testing.T) {
	t.Parallel()
	dc := converter.GetDefaultDataConverter()
	type summary struct {
		types []enumspb.EventType
	}
	read := func(file string) summary {
		var s summary
		for _, ev := range loadHistory(t, file) {
			s.types = append(s.types, ev.GetEventType())
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
				attrs := ev.GetWorkflowExecutionStartedEventAttributes()
				require.True(t, attrs.GetEagerExecutionAccepted(), "%s: not an eager start", file)
				var in workflows.AggregateInput
				require.NoError(t, dc.FromPayloads(attrs.GetInput(), &in))
				require.True(t, in.OneShot)
				require.Equal(t, workflows.Revision1, in.Revision)
				require.Equal(t, workflows.DefaultPublishBatchSize, in.PublishBatchSize, "Revision1: settings in the input")
			case enumspb.EVENT_TYPE_MARKER_RECORDED:
				var lai struct {
					ActivityType string
				}
				details := ev.GetMarkerRecordedEventAttributes().GetDetails()
				require.NoError(t, dc.FromPayloads(details["data"], &lai))
				require.Equal(t, workflows.PublishBatchActivity, lai.ActivityType, "%s: a local activity other than the batch", file)
			}
		}
		return s
	}
	one := read(oneShotHistoryFile)
	require.Equal(t, []enumspb.EventType{
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
		enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED,
		enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
		enumspb.EVENT_TYPE_MARKER_RECORDED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
	}, one.types)

	gap := read(oneShotGapHistoryFile)
	require.NotContains(t, gap.types, enumspb.EVENT_TYPE_TIMER_STARTED)
	require.Contains(t, gap.types, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
	markers := 0
	for _, typ := range gap.types {
		if typ == enumspb.EVENT_TYPE_MARKER_RECORDED {
			markers++
		}
	}
	require.Equal(t, 2, markers, "the first batch (1) and the one after the gap closed (2, 3)")
}

// r2Summary reads a Revision2 recording: its input, the local activities'
// results in order, the regular activities, and the timers.
type r2Summary struct {
	input   workflows.AggregateInput
	types   []enumspb.EventType
	markers []string // local activity type of each marker
	results []map[string]any
	regular []string
	timers  []time.Duration
}

func readR2(t *testing.T, file string) r2Summary {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	var s r2Summary
	for _, ev := range loadHistory(t, file) {
		s.types = append(s.types, ev.GetEventType())
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			require.NoError(t, dc.FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), &s.input))
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			details := ev.GetMarkerRecordedEventAttributes().GetDetails()
			var lai struct{ ActivityType string }
			require.NoError(t, dc.FromPayloads(details["data"], &lai))
			s.markers = append(s.markers, lai.ActivityType)
			res := map[string]any{}
			if r, ok := details["result"]; ok {
				require.NoError(t, dc.FromPayloads(r, &res))
			}
			s.results = append(s.results, res)
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			s.regular = append(s.regular, ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName())
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			s.timers = append(s.timers, ev.GetTimerStartedEventAttributes().GetStartToFireTimeout().AsDuration())
		}
	}
	// Nothing of the settings travels in a Revision2 input.
	require.Equal(t, workflows.Revision2, s.input.Revision, file)
	require.Zero(t, s.input.IdleTimeout, file)
	require.Zero(t, s.input.PublishBatchSize, file)
	require.Zero(t, s.input.MaxHistoryEvents, file)
	require.Zero(t, s.input.MaxBlockedRefs, file)
	require.Nil(t, s.input.Policies, file)
	return s
}

// The Revision2 recordings hold what they are about: the settings come in
// the result of the run's first activity that answers (a batch, or the
// cursor read), and the run follows them.
func TestRevision2HistoryContents(t *testing.T) {
	t.Parallel()
	t.Run("one-shot: as cheap as Revision1", func(t *testing.T) {
		t.Parallel()
		s := readR2(t, r2OneShotHistoryFile)
		require.Equal(t, []enumspb.EventType{
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
			enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
			enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED,
			enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
			enumspb.EVENT_TYPE_MARKER_RECORDED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
		}, s.types)
		require.Equal(t, []string{workflows.PublishBatchActivity}, s.markers)
		require.Contains(t, s.results[0], "settings", "the batch answered with the settings")
		require.True(t, s.input.OneShot)
	})
	t.Run("keep-alive: settings from the cursor read", func(t *testing.T) {
		t.Parallel()
		s := readR2(t, r2KeepAliveHistoryFile)
		// failed batch, cursor read with settings, failed batch at evt-1,
		// the batch of 2-3 (the worker's size).
		require.Equal(t, []string{workflows.PublishBatchActivity, workflows.LoadCursorActivity,
			workflows.PublishBatchActivity, workflows.PublishBatchActivity}, s.markers)
		settings, ok := s.results[1]["settings"].(map[string]any)
		require.True(t, ok, "the cursor read answered with the settings: %v", s.results[1])
		require.EqualValues(t, 2, settings["publish_batch_size"])
		require.EqualValues(t, 2, s.results[3]["published"])
		require.Equal(t, []string{workflows.PublishEventActivity}, s.regular)
		require.Equal(t, []time.Duration{2 * time.Second}, s.timers, "the worker's idle timeout")
	})
	t.Run("resumed: asks again first", func(t *testing.T) {
		t.Parallel()
		s := readR2(t, r2ResumedHistoryFile)
		require.True(t, s.input.Resumed)
		require.Equal(t, workflows.LoadCursorActivity, s.markers[0], "the first thing a resumed run does")
		require.Contains(t, s.results[0], "settings")
		require.NotEmpty(t, s.regular)
		for _, name := range s.regular {
			require.Equal(t, workflows.PublishEventActivity, name, "the worker's fast path is off")
		}
	})
}

// The replays above prove something only if a changed workflow fails them.
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
	for _, file := range recordedHistories {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: workflows.AggregateWorkflowName})
			err := r.ReplayWorkflowHistoryFromJSONFile(quietLogger(), file)
			require.Error(t, err)
			// TMPRL1100 is the SDK's code for a non-determinism error.
			require.ErrorContains(t, err, "TMPRL1100")
		})
	}
}
