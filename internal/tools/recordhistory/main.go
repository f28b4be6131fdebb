// Command recordhistory records the history of one aggregate workflow run
// for the replay test in package workflows.
//
// It starts an in-memory embedded Temporal server on a free port, runs a
// worker with workflows.Aggregate and stand-in activities (the recording is
// about the workflow's own commands, not about PostgreSQL or RabbitMQ),
// signal-with-starts one aggregate, signals its events out of order and with
// a duplicate, waits until the workflow completes idle, and writes the full
// history as JSON in the format worker.WorkflowReplayer reads:
//
//	go run ./internal/tools/recordhistory -out workflows/testdata/aggregate_history.json
//
// Re-record only when the workflow changed on purpose, and keep the old file
// as well: histories recorded by the old code must still replay.
package main

import (
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

	"github.com/ferry-outbox/ferry/devserver"
	"github.com/ferry-outbox/ferry/workflows"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "recordhistory:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "workflows/testdata/aggregate_history.json", "file to write the history to")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	srv, err := devserver.Start(ctx, devserver.Config{Address: "127.0.0.1:0"})
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
	w := worker.New(c, taskQueue, worker.Options{Identity: "recordhistory"})
	w.RegisterWorkflowWithOptions(workflows.Aggregate, workflow.RegisterOptions{Name: workflows.AggregateWorkflowName})
	w.RegisterActivityWithOptions(publish, activity.RegisterOptions{Name: workflows.PublishEventActivity})
	w.RegisterActivityWithOptions(loadCursor, activity.RegisterOptions{Name: workflows.LoadCursorActivity})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer w.Stop()

	id := workflows.WorkflowID("order", "o-1")
	ref := func(v int64) workflows.EventRef {
		return workflows.EventRef{ID: fmt.Sprintf("evt-%d", v), Version: v, Type: "order.changed"}
	}
	we, err := c.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal,
		workflows.EventsSignalArg{Events: []workflows.EventRef{ref(2)}},
		client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue},
		workflows.AggregateWorkflowName,
		workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", IdleTimeout: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	// Out of order, with a repeat: 2 (above), 1, 1, 3, 5, 4.
	for _, v := range []int64{1, 1, 3, 5, 4} {
		if err := c.SignalWorkflow(ctx, id, we.GetRunID(), workflows.EventsSignal,
			workflows.EventsSignalArg{Events: []workflows.EventRef{ref(v)}}); err != nil {
			return fmt.Errorf("signal v%d: %w", v, err)
		}
	}
	if err := we.Get(ctx, nil); err != nil {
		return fmt.Errorf("workflow %s: %w", id, err)
	}

	hist := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, id, we.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
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
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %d events to %s\n", len(hist.Events), *out)
	return nil
}

// publish stands in for activities.PublishEvent.
func publish(context.Context, workflows.PublishInput) (workflows.PublishResult, error) {
	return workflows.PublishResult{}, nil
}

// loadCursor stands in for activities.LoadAggregateCursor: nothing delivered yet.
func loadCursor(context.Context, workflows.CursorInput) (workflows.CursorResult, error) {
	return workflows.CursorResult{}, nil
}

type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
