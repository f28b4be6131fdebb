// Command recordhistory records the history of one aggregate workflow run
// for the replay tests in package workflows.
//
// It starts an in-memory embedded Temporal server on a free port (with
// Ferry's search attributes), runs a worker with workflows.Aggregate and
// stand-in activities (the recording is about the workflow's own commands,
// not about PostgreSQL or RabbitMQ), drives one aggregate through a
// scenario, waits until the workflow completes idle, and writes the full
// history as JSON in the format worker.WorkflowReplayer reads:
//
//	cd dev && go run ./tools/recordhistory -scenario quarantine
//
// The scenarios:
//
//   - aggregate (the default): events signalled out of order and with a
//     duplicate, published in order.
//   - batch: the fast path (one local activity per run of events): events
//     1-5 in one signal, evt-4 fails its first regular attempt so the batch
//     stops before it and the regular path retries it, then 7 (a gap) and
//     6, published together; one idle timer throughout.
//   - oneshot: how a poller starts an aggregate it has not dispatched
//     recently: an eager start of a one-shot run (current revision) with
//     its one event in the input; the first batch reads the cursor and
//     publishes it, and the run completes in its first workflow task.
//   - oneshot_gap: a one-shot run started with events 1 and 3 publishes 1,
//     waits for the missing 2, gets 2 and a repeated 3 by signal,
//     publishes both in one batch and completes, with no timer.
//   - quarantine: an event's publish keeps failing with a retryable
//     "Unroutable" error under a policy of two attempts, so it is
//     quarantined; an event signalled meanwhile waits; a repair update
//     (retry) lets it through, and the rest follow in order.
//
// -out defaults to workflows/testdata/<scenario>_history.json. Re-record
// only when the workflow changed on purpose, and keep the old file as well:
// histories recorded by the old code must still replay.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/dev/devserver"
	"github.com/ferry-outbox/ferry/workflows"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "recordhistory:", err)
		os.Exit(1)
	}
}

// scenario drives one aggregate workflow on taskQueue to completion and
// returns its workflow and run id.
type scenario func(ctx context.Context, c client.Client, taskQueue string, acts *standIns) (id, runID string, err error)

var scenarios = map[string]scenario{
	"aggregate":   recordAggregate,
	"quarantine":  recordQuarantine,
	"batch":       recordBatch,
	"oneshot":     recordOneShot,
	"oneshot_gap": recordOneShotGap,
}

func run() error {
	name := flag.String("scenario", "aggregate", "what to record: aggregate, quarantine, batch, oneshot or oneshot_gap")
	out := flag.String("out", "", "file to write the history to (default ../workflows/testdata/<scenario>_history.json, from dev/)")
	flag.Parse()
	record, ok := scenarios[*name]
	if !ok {
		return fmt.Errorf("-scenario %q: want aggregate, quarantine, batch, oneshot or oneshot_gap", *name)
	}
	path := cmp.Or(*out, filepath.Join("..", "workflows", "testdata", *name+"_history.json"))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The search attributes must exist: the aggregate workflow upserts
	// them when it blocks, and the server fails the task otherwise.
	srv, err := devserver.Start(ctx, devserver.Config{Address: "127.0.0.1:0", SearchAttributes: workflows.SearchAttributeTypes})
	if err != nil {
		return err
	}
	defer srv.Stop()

	// A fixed identity: the default (pid@hostname) would end up in the
	// committed history.
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  srv.FrontendAddress(),
		Namespace: srv.Namespace(),
		Identity:  "recordhistory",
		Logger:    quiet{},
	})
	if err != nil {
		return fmt.Errorf("dial %s: %w", srv.FrontendAddress(), err)
	}
	defer c.Close()

	const taskQueue = "ferry-recordhistory"
	acts := &standIns{poisoned: map[string]bool{}, flaky: map[string]int{}}
	w := worker.New(c, taskQueue, worker.Options{Identity: "recordhistory"})
	w.RegisterWorkflowWithOptions(workflows.Aggregate, workflow.RegisterOptions{Name: workflows.AggregateWorkflowName})
	w.RegisterActivityWithOptions(acts.publish, activity.RegisterOptions{Name: workflows.PublishEventActivity})
	w.RegisterActivityWithOptions(loadCursor, activity.RegisterOptions{Name: workflows.LoadCursorActivity})
	w.RegisterActivityWithOptions(acts.publishBatch, activity.RegisterOptions{Name: workflows.PublishBatchActivity})
	w.RegisterActivityWithOptions(quarantine, activity.RegisterOptions{Name: workflows.QuarantineActivity})
	w.RegisterActivityWithOptions(repair, activity.RegisterOptions{Name: workflows.RepairActivity})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer w.Stop()

	id, runID, err := record(ctx, c, taskQueue, acts)
	if err != nil {
		return err
	}

	hist := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return fmt.Errorf("read history: %w", err)
		}
		hist.Events = append(hist.Events, ev)
	}
	last := hist.Events[len(hist.Events)-1].GetEventType()
	if last != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED {
		return fmt.Errorf("history ends with %s, want a completed workflow", last)
	}

	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		return fmt.Errorf("encode history: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %d events to %s\n", len(hist.Events), path)
	return nil
}

func ref(v int64) workflows.EventRef {
	return workflows.EventRef{ID: fmt.Sprintf("evt-%d", v), Version: v, Type: "order.changed"}
}

func signal(ctx context.Context, c client.Client, id, runID string, versions ...int64) error {
	arg := workflows.EventsSignalArg{}
	for _, v := range versions {
		arg.Events = append(arg.Events, ref(v))
	}
	if err := c.SignalWorkflow(ctx, id, runID, workflows.EventsSignal, arg); err != nil {
		return fmt.Errorf("signal %v: %w", versions, err)
	}
	return nil
}

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

// oneShotInput is what a poller starts a one-shot run with.
func oneShotInput(versions ...int64) workflows.AggregateInput {
	in := workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", IdleTimeout: 2 * time.Second,
		PublishBatchSize: workflows.DefaultPublishBatchSize, Revision: workflows.CurrentRevision, OneShot: true}
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

// standIns replace package activities.
type standIns struct {
	mu       sync.Mutex
	poisoned map[string]bool // event ids whose publish fails with a retryable "Unroutable"
	flaky    map[string]int  // event ids whose next regular attempts fail, and how many
}

func (s *standIns) poison(eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.poisoned[eventID] = true
}

func (s *standIns) heal(eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.poisoned, eventID)
}

// publish stands in for activities.PublishEvent.
func (s *standIns) publish(_ context.Context, in workflows.PublishInput) (workflows.PublishResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flaky[in.EventID] > 0 {
		s.flaky[in.EventID]--
		return workflows.PublishResult{}, temporal.NewApplicationError(
			fmt.Sprintf("broker hiccup publishing %s (stand-in)", in.EventID), "BrokerUnavailable")
	}
	if s.poisoned[in.EventID] {
		return workflows.PublishResult{}, temporal.NewApplicationError(
			fmt.Sprintf("no binding routes event %s (stand-in)", in.EventID), "Unroutable")
	}
	return workflows.PublishResult{}, nil
}

// publishBatch stands in for activities.PublishBatch: the leading events
// that are neither poisoned nor flaky.
func (s *standIns) publishBatch(_ context.Context, in workflows.PublishBatchInput) (workflows.PublishBatchResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var res workflows.PublishBatchResult
	if in.LoadCursor {
		// Nothing delivered yet (as loadCursor): the run from version 1.
		var run []workflows.EventRef
		for _, ev := range in.Events {
			if ev.Version != int64(len(run))+1 {
				break
			}
			run = append(run, ev)
		}
		if len(run) == 0 {
			return res, nil
		}
		in.Events = run
	}
	for _, ev := range in.Events {
		if s.poisoned[ev.ID] || s.flaky[ev.ID] > 0 {
			res.Stopped = fmt.Sprintf("event %s did not publish (stand-in)", ev.ID)
			break
		}
		res.Published++
	}
	if res.Published == 0 {
		return res, temporal.NewApplicationError(res.Stopped, "BrokerUnavailable")
	}
	return res, nil
}

// loadCursor stands in for activities.LoadAggregateCursor: nothing delivered yet.
func loadCursor(context.Context, workflows.CursorInput) (workflows.CursorResult, error) {
	return workflows.CursorResult{}, nil
}

// quarantine stands in for activities.QuarantineEvent.
func quarantine(context.Context, workflows.QuarantineInput) error { return nil }

// repair stands in for activities.ApplyRepair: the first audit row.
func repair(_ context.Context, in workflows.RepairInput) (workflows.RepairResult, error) {
	return workflows.RepairResult{
		RequestID: in.Request.RequestID, Action: in.Request.Action, EventID: in.Request.EventID,
		Version: in.Version, AuditID: 1,
	}, nil
}

type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
