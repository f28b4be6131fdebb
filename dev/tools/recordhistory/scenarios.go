package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/workflows"
)

// recordAggregate: events 2, 1, 1, 3, 5, 4, one per signal, published in
// order, then idle completion.
func recordAggregate(ctx context.Context, c client.Client, taskQueue string, _ *standIns) (string, string, error) {
	id := workflows.WorkflowID("order", "o-1")
	we, err := c.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal,
		workflows.EventsSignalArg{Events: []workflows.EventRef{ref(2)}},
		client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue},
		workflows.AggregateWorkflowName,
		workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", IdleTimeout: 2 * time.Second})
	if err != nil {
		return "", "", fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	// Out of order, with a repeat: 2 (above), 1, 1, 3, 5, 4.
	for _, v := range []int64{1, 1, 3, 5, 4} {
		if err := signal(ctx, c, id, we.GetRunID(), v); err != nil {
			return "", "", err
		}
	}
	if err := we.Get(ctx, nil); err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", id, err)
	}
	return id, we.GetRunID(), nil
}

// recordBatch: the fast path. Events 1-5 in one signal: 1-3 go out in one
// batch, evt-4's batch fails and its regular attempt fails once, then 5
// goes alone; 7 arrives (a gap), then 6, and both go out in one batch; idle
// completion.
func recordBatch(ctx context.Context, c client.Client, taskQueue string, acts *standIns) (string, string, error) {
	id := workflows.WorkflowID("order", "o-1")
	acts.mu.Lock()
	acts.flaky["evt-4"] = 1
	acts.mu.Unlock()
	we, err := c.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal,
		workflows.EventsSignalArg{Events: []workflows.EventRef{ref(1), ref(2), ref(3), ref(4), ref(5)}},
		client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue},
		workflows.AggregateWorkflowName,
		workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", IdleTimeout: 3 * time.Second,
			PublishBatchSize: workflows.DefaultPublishBatchSize})
	if err != nil {
		return "", "", fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	if err := waitDelivered(ctx, c, id, we.GetRunID(), 5); err != nil {
		return "", "", err
	}
	for _, v := range []int64{7, 6} {
		if err := signal(ctx, c, id, we.GetRunID(), v); err != nil {
			return "", "", err
		}
	}
	if err := we.Get(ctx, nil); err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", id, err)
	}
	return id, we.GetRunID(), nil
}

// oneShotInput is what a poller of Revision1 started a one-shot run with
// (the oneshot and oneshot_gap recordings).
func oneShotInput(versions ...int64) workflows.AggregateInput {
	in := workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", IdleTimeout: 2 * time.Second,
		PublishBatchSize: workflows.DefaultPublishBatchSize, Revision: workflows.Revision1, OneShot: true}
	for _, v := range versions {
		in.Pending = append(in.Pending, ref(v))
	}
	return in
}

// startOneShot starts a run as the poller does: eagerly, on the client the
// worker polls with.
func startOneShot(ctx context.Context, c client.Client, taskQueue string, in workflows.AggregateInput) (client.WorkflowRun, error) {
	id := workflows.WorkflowID(in.AggregateType, in.AggregateID)
	we, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: taskQueue, EnableEagerStart: true, WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, workflows.AggregateWorkflowName, in)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	return we, nil
}

// recordOneShot: one event in a one-shot run's input.
func recordOneShot(ctx context.Context, c client.Client, taskQueue string, _ *standIns) (string, string, error) {
	we, err := startOneShot(ctx, c, taskQueue, oneShotInput(1))
	if err != nil {
		return "", "", err
	}
	if err := we.Get(ctx, nil); err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", we.GetID(), err)
	}
	return we.GetID(), we.GetRunID(), nil
}

// recordOneShotGap: events 1 and 3 in the input, 2 and 3 signalled once
// 1 is out.
func recordOneShotGap(ctx context.Context, c client.Client, taskQueue string, _ *standIns) (string, string, error) {
	we, err := startOneShot(ctx, c, taskQueue, oneShotInput(1, 3))
	if err != nil {
		return "", "", err
	}
	if err := waitDelivered(ctx, c, we.GetID(), we.GetRunID(), 1); err != nil {
		return "", "", err
	}
	if err := signal(ctx, c, we.GetID(), we.GetRunID(), 2, 3); err != nil {
		return "", "", err
	}
	if err := we.Get(ctx, nil); err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", we.GetID(), err)
	}
	return we.GetID(), we.GetRunID(), nil
}

// recordR2OneShot: one event in a one-shot run's input, as pollers start
// one now.
func recordR2OneShot(ctx context.Context, c client.Client, taskQueue string, _ *standIns) (string, string, error) {
	in := workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", Revision: workflows.Revision2, OneShot: true,
		Pending: []workflows.EventRef{ref(1)}}
	we, err := startOneShot(ctx, c, taskQueue, in)
	if err != nil {
		return "", "", err
	}
	if err := we.Get(ctx, nil); err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", we.GetID(), err)
	}
	return we.GetID(), we.GetRunID(), nil
}

// recordR2KeepAlive: a Signal-With-Start of Revision2 with 1-3; evt-1
// fails its batch and its first regular attempt.
func recordR2KeepAlive(ctx context.Context, c client.Client, taskQueue string, acts *standIns) (string, string, error) {
	id := workflows.WorkflowID("order", "o-1")
	acts.mu.Lock()
	acts.flaky["evt-1"] = 1
	acts.settings = workflows.Settings{PublishBatchSize: 2, IdleTimeout: 2 * time.Second}
	acts.mu.Unlock()
	we, err := c.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal,
		workflows.EventsSignalArg{Events: []workflows.EventRef{ref(1), ref(2), ref(3)}},
		client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue},
		workflows.AggregateWorkflowName,
		workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", Revision: workflows.Revision2})
	if err != nil {
		return "", "", fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	if err := we.Get(ctx, nil); err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", id, err)
	}
	return id, we.GetRunID(), nil
}

// recordR2Resumed: events 1-5 in one signal to a run whose worker allows
// 20 history events and no fast path: the first run publishes three and
// continues as new, the next asks its worker again and publishes the other
// two; that last run is recorded.
func recordR2Resumed(ctx context.Context, c client.Client, taskQueue string, acts *standIns) (string, string, error) {
	id := workflows.WorkflowID("order", "o-1")
	acts.mu.Lock()
	acts.settings = workflows.Settings{PublishBatchSize: -1, MaxHistoryEvents: 20, IdleTimeout: 2 * time.Second}
	acts.mu.Unlock()
	we, err := c.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal,
		workflows.EventsSignalArg{Events: []workflows.EventRef{ref(1), ref(2), ref(3), ref(4), ref(5)}},
		client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue},
		workflows.AggregateWorkflowName,
		workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", Revision: workflows.Revision2})
	if err != nil {
		return "", "", fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	first := we.GetRunID()
	// Get follows the chain of runs to the last one.
	if err := we.Get(ctx, nil); err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", id, err)
	}
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return "", "", fmt.Errorf("describe %s: %w", id, err)
	}
	last := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	if last == first {
		return "", "", errors.New("the run did not continue as new")
	}
	return id, last, nil
}

// waitDelivered polls the workflow's state until it delivered version v.
func waitDelivered(ctx context.Context, c client.Client, id, runID string, v int64) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := c.QueryWorkflow(ctx, id, runID, workflows.StateQuery)
		if err != nil {
			return fmt.Errorf("query %s: %w", id, err)
		}
		var st workflows.State
		if err := resp.Get(&st); err != nil {
			return fmt.Errorf("decode state of %s: %w", id, err)
		}
		if st.Delivered >= v {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workflow did not deliver v%d in time", v)
		case <-tick.C:
		}
	}
}

// recordedRepairID is the request id of the quarantine scenario's repair.
const recordedRepairID = "recordhistory-repair-1"

// recordQuarantine: events 1, 2, 3 in one signal; evt-2 fails twice
// (policy MaxAttempts 2 for its type) and is quarantined; event 4 arrives
// while it is blocked; a retry repair by update lets evt-2 through, then 3
// and 4 follow, then idle completion.
func recordQuarantine(ctx context.Context, c client.Client, taskQueue string, acts *standIns) (string, string, error) {
	id := workflows.WorkflowID("order", "o-1")
	acts.poison("evt-2")
	we, err := c.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal,
		workflows.EventsSignalArg{Events: []workflows.EventRef{ref(1), ref(2), ref(3)}},
		client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue},
		workflows.AggregateWorkflowName,
		workflows.AggregateInput{
			AggregateType: "order", AggregateID: "o-1", IdleTimeout: 2 * time.Second,
			Policies: map[string]workflows.EventPolicy{"order.changed": {MaxAttempts: 2}},
		})
	if err != nil {
		return "", "", fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	runID := we.GetRunID()
	blocked, err := waitBlocked(ctx, c, id, runID)
	if err != nil {
		return "", "", err
	}
	if blocked.EventID != "evt-2" || blocked.ErrorClass != "Unroutable" {
		return "", "", fmt.Errorf("blocked at %s with %s, want evt-2 with Unroutable", blocked.EventID, blocked.ErrorClass)
	}
	if err := signal(ctx, c, id, runID, 4); err != nil {
		return "", "", err
	}

	acts.heal("evt-2")
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		RunID:        runID,
		UpdateName:   workflows.RepairUpdate,
		UpdateID:     recordedRepairID,
		WaitForStage: client.WorkflowUpdateStageCompleted,
		Args: []any{workflows.RepairRequest{
			RequestID: recordedRepairID,
			Action:    workflows.ActionRetry,
			EventID:   blocked.EventID,
			Reason:    "binding for order.changed added",
			Actor:     "recordhistory",
		}},
	})
	if err != nil {
		return "", "", fmt.Errorf("repair update: %w", err)
	}
	var res workflows.RepairResult
	if err := h.Get(ctx, &res); err != nil {
		return "", "", fmt.Errorf("repair update: %w", err)
	}
	if err := we.Get(ctx, nil); err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", id, err)
	}
	return id, runID, nil
}

// waitBlocked polls the workflow's state until it reports a blocked event.
func waitBlocked(ctx context.Context, c client.Client, id, runID string) (*workflows.Blocked, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := c.QueryWorkflow(ctx, id, runID, workflows.StateQuery)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", id, err)
		}
		var st workflows.State
		if err := v.Get(&st); err != nil {
			return nil, fmt.Errorf("decode state of %s: %w", id, err)
		}
		if st.Blocked != nil {
			return st.Blocked, nil
		}
		select {
		case <-ctx.Done():
			return nil, errors.New("workflow did not block in time")
		case <-tick.C:
		}
	}
}

// recordR3Handoff: see the package doc.
func recordR3Handoff(ctx context.Context, c client.Client, taskQueue string, acts *standIns) (string, string, error) {
	acts.mu.Lock()
	acts.flaky["evt-1"] = 1
	acts.busyReleases = 2
	acts.mu.Unlock()
	in := workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", Revision: workflows.Revision3, OneShot: true,
		Epoch: 7, Handoff: true, HandoffCause: "Unroutable", Pending: []workflows.EventRef{ref(1), ref(2)}}
	we, err := startOneShot(ctx, c, taskQueue, in)
	if err != nil {
		return "", "", err
	}
	if err := waitDelivered(ctx, c, we.GetID(), we.GetRunID(), 2); err != nil {
		return "", "", err
	}
	time.Sleep(500 * time.Millisecond) // the first release answers Busy
	if err := c.SignalWorkflow(ctx, we.GetID(), we.GetRunID(), workflows.EventsSignal,
		workflows.EventsSignalArg{Events: []workflows.EventRef{ref(3)}, Epoch: 7}); err != nil {
		return "", "", fmt.Errorf("signal 3: %w", err)
	}
	if err := waitDelivered(ctx, c, we.GetID(), we.GetRunID(), 3); err != nil {
		return "", "", err
	}
	time.Sleep(500 * time.Millisecond) // the second answers Busy too
	if err := c.SignalWorkflow(ctx, we.GetID(), we.GetRunID(), workflows.EventsSignal,
		workflows.EventsSignalArg{Events: []workflows.EventRef{ref(4)}, Epoch: 7}); err != nil {
		return "", "", fmt.Errorf("signal 4: %w", err)
	}
	if err := we.Get(ctx, nil); err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", we.GetID(), err)
	}
	return we.GetID(), we.GetRunID(), nil
}

// recordR3Adopt: see the package doc.
func recordR3Adopt(ctx context.Context, c client.Client, taskQueue string, acts *standIns) (string, string, error) {
	id := workflows.WorkflowID("order", "o-1")
	acts.mu.Lock()
	acts.settings = workflows.Settings{IdleTimeout: time.Minute}
	acts.flaky["evt-2"] = 1
	acts.mu.Unlock()
	we, err := c.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal,
		workflows.EventsSignalArg{Events: []workflows.EventRef{ref(1)}},
		client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue},
		workflows.AggregateWorkflowName,
		workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", Revision: workflows.Revision2})
	if err != nil {
		return "", "", fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	if err := waitDelivered(ctx, c, id, we.GetRunID(), 1); err != nil {
		return "", "", err
	}
	if err := c.SignalWorkflow(ctx, id, we.GetRunID(), workflows.EventsSignal,
		workflows.EventsSignalArg{Events: []workflows.EventRef{ref(2)}, Epoch: 9, Handoff: true}); err != nil {
		return "", "", fmt.Errorf("signal 2: %w", err)
	}
	if err := we.Get(ctx, nil); err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", id, err)
	}
	return id, we.GetRunID(), nil
}
