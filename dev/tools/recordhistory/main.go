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
//   - r2_oneshot: oneshot at Revision2, as pollers start an aggregate now:
//     no settings in the input; the first batch answers with the worker's.
//   - r2_keepalive: a keep-alive run of Revision2 (Signal-With-Start, no
//     settings in the input): events 1-3 in one signal, evt-1's batch
//     fails, so the cursor read answers with the worker's settings (batch
//     size 2, idle 2s); evt-1 goes the regular way (one failed attempt,
//     then success), 2-3 in one batch, idle completion on the worker's
//     timeout.
//   - r2_resumed: a run of Revision2 continued as new (the worker's
//     history budget is 20 events, the fast path off): it asks its worker
//     again with a cursor read, publishes the rest and completes; the
//     recorded history is that last run's.
//   - r3_handoff: the publish-first lane hands an aggregate to its
//     workflow (Revision3, epoch 7, cause Unroutable) with events 1 and 2
//     in the start's input: the run reads its cursor and settings, evt-1
//     goes the regular way (one failed attempt, then success), 2 in a
//     batch; the release answers Busy (a version handed but not
//     delivered) and 3 arrives by a signal of the same epoch; the release
//     answers Busy again and 4 arrives; the release answers Released and
//     the run completes.
//   - r3_adopt: a Signal-With-Start of Revision2 (no epoch) publishes 1
//     and idles; the lane hands the aggregate over anew with a signal of
//     epoch 9 and evt-2 (handoff): the run takes the epoch, reads its
//     cursor, publishes evt-2 the regular way and releases instead of
//     idling.
//
// -out defaults to workflows/testdata/<scenario>_history.json. Re-record
// only when the workflow changed on purpose, and keep the old file as well:
// histories recorded by the old code must still replay.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
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
	"aggregate":    recordAggregate,
	"quarantine":   recordQuarantine,
	"batch":        recordBatch,
	"oneshot":      recordOneShot,
	"oneshot_gap":  recordOneShotGap,
	"r2_oneshot":   recordR2OneShot,
	"r2_keepalive": recordR2KeepAlive,
	"r2_resumed":   recordR2Resumed,
	"r3_handoff":   recordR3Handoff,
	"r3_adopt":     recordR3Adopt,
}

const scenarioNames = "aggregate, quarantine, batch, oneshot, oneshot_gap, r2_oneshot, r2_keepalive, r2_resumed, r3_handoff or r3_adopt"

func run() error {
	name := flag.String("scenario", "aggregate", "what to record: "+scenarioNames)
	out := flag.String("out", "", "file to write the history to (default ../workflows/testdata/<scenario>_history.json, from dev/)")
	flag.Parse()
	record, ok := scenarios[*name]
	if !ok {
		return fmt.Errorf("-scenario %q: want %s", *name, scenarioNames)
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
	w.RegisterActivityWithOptions(acts.loadCursor, activity.RegisterOptions{Name: workflows.LoadCursorActivity})
	w.RegisterActivityWithOptions(acts.publishBatch, activity.RegisterOptions{Name: workflows.PublishBatchActivity})
	w.RegisterActivityWithOptions(quarantine, activity.RegisterOptions{Name: workflows.QuarantineActivity})
	w.RegisterActivityWithOptions(repair, activity.RegisterOptions{Name: workflows.RepairActivity})
	w.RegisterActivityWithOptions(acts.release, activity.RegisterOptions{Name: workflows.ReleaseAggregateActivity})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer w.Stop()

	id, runID, err := record(ctx, c, taskQueue, acts)
	if err != nil {
		return err
	}

	hist := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT) // runID "": the latest run
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
