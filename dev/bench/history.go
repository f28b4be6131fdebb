package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"

	"github.com/ferry-outbox/ferry/workflows"
)

// History is what the Temporal server recorded for one Ferry run's
// aggregate workflows, continue-as-new runs included.
type History struct {
	// Aggregates is the number of aggregates of the run; Sampled how many
	// of them were read. When Sampled < Aggregates every figure below is
	// the sample's total × Aggregates / Sampled.
	Aggregates int `json:"aggregates"`
	Sampled    int `json:"sampled"`
	// Runs is the number of workflow runs (continue-as-new makes more than
	// one per aggregate); Open of them were still running (idle, waiting
	// for more events) when read: their idle timer, last workflow task and
	// completion come later and are not in the counts.
	Runs float64 `json:"runs"`
	Open float64 `json:"open"`
	// Events counts history events; WorkflowTasks WorkflowTaskCompleted
	// events, Activities ActivityTaskScheduled events, LocalActivities
	// MarkerRecorded events (one per local activity), Signals
	// WorkflowExecutionSignaled events.
	Events          float64 `json:"events"`
	WorkflowTasks   float64 `json:"workflow_tasks"`
	Activities      float64 `json:"activities"`
	LocalActivities float64 `json:"local_activities"`
	Signals         float64 `json:"signals"`
}

func (h *History) add(o History) {
	h.Runs += o.Runs
	h.Open += o.Open
	h.Events += o.Events
	h.WorkflowTasks += o.WorkflowTasks
	h.Activities += o.Activities
	h.LocalActivities += o.LocalActivities
	h.Signals += o.Signals
}

func (h *History) scale(f float64) {
	h.Runs *= f
	h.Open *= f
	h.Events *= f
	h.WorkflowTasks *= f
	h.Activities *= f
	h.LocalActivities *= f
	h.Signals *= f
}

// countHistory reads the histories of the aggregate workflows of aggType
// for up to sample of aggIDs, chosen uniformly: each one's latest run, and
// the runs before it that continued as new into it (the started event
// names them). It asks the history service, not visibility, which the
// embedded server updates later and answers slowly under load.
//
// A workflow that completed idle and was started anew by a later event
// has runs not linked by continue-as-new; only the latest is read. These
// workloads leave no aggregate idle for longer than ferry's idle timeout
// in the middle of a run.
func countHistory(ctx context.Context, c client.Client, aggType string, aggIDs []string, sample int) (History, error) {
	h := History{Aggregates: len(aggIDs)}
	picked := aggIDs
	if len(aggIDs) > sample {
		picked = make([]string, 0, sample)
		for _, i := range rand.Perm(len(aggIDs))[:sample] {
			picked = append(picked, aggIDs[i])
		}
	}
	h.Sampled = len(picked)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, id := range picked {
		g.Go(func() error {
			one, err := aggregateHistory(gctx, c, workflows.WorkflowID(aggType, id))
			if err != nil {
				return err
			}
			mu.Lock()
			h.add(one)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return History{}, err
	}
	if h.Sampled > 0 && h.Sampled < h.Aggregates {
		h.scale(float64(h.Aggregates) / float64(h.Sampled))
	}
	return h, nil
}

// aggregateHistory counts every run of one aggregate workflow, newest
// first, following continue-as-new back to the first run.
func aggregateHistory(ctx context.Context, c client.Client, workflowID string) (History, error) {
	var total History
	runID := ""
	for first := true; ; first = false {
		one, prev, open, err := readRun(ctx, c, workflowID, runID)
		if err != nil {
			return History{}, err
		}
		one.Runs = 1
		if first && open {
			one.Open = 1
		}
		total.add(one)
		if prev == "" {
			return total, nil
		}
		runID = prev
	}
}

// readRun counts one run's events, retrying while the server is too busy
// to answer in time. prev is the run that continued as new into this one.
func readRun(ctx context.Context, c client.Client, workflowID, runID string) (h History, prev string, open bool, err error) {
	for {
		h, prev, open, err = readRunOnce(ctx, c, workflowID, runID)
		var busy *serviceerror.DeadlineExceeded
		var unavailable *serviceerror.Unavailable
		retry := errors.As(err, &busy) || errors.As(err, &unavailable) || (errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil)
		if !retry {
			return h, prev, open, err
		}
		if !sleepCtx(ctx, time.Second) {
			return h, prev, open, fmt.Errorf("read history of %s: %w (last: %v)", workflowID, ctx.Err(), err)
		}
	}
}

func readRunOnce(ctx context.Context, c client.Client, workflowID, runID string) (h History, prev string, open bool, err error) {
	it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	open = true
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return h, "", false, fmt.Errorf("read history of %s: %w", workflowID, err)
		}
		h.Events++
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			prev = ev.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			h.WorkflowTasks++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			h.Activities++
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			h.LocalActivities++
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			h.Signals++
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
			open = false
		}
	}
	return h, prev, open, nil
}

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// workflowIDsOf are the workflow IDs of aggType's aggregates aggIDs.
func workflowIDsOf(aggType string, aggIDs []string) []string {
	ids := make([]string, len(aggIDs))
	for i, id := range aggIDs {
		ids[i] = workflows.WorkflowID(aggType, id)
	}
	return ids
}

// closeWorkflows terminates those of the workflows ids (a run's) that
// are still open, idle until ferry's idle timeout or retrying. Left alone,
// each would fire its timer and complete (with no worker on the run's task
// queue, its last workflow task would wait forever) during a later run,
// whose figures would then carry the earlier run's completions: thousands
// after one-per-agg. It returns how many it terminated.
func closeWorkflows(ctx context.Context, c client.Client, ids []string) (int, error) {
	var mu sync.Mutex
	closed := 0
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, id := range ids {
		g.Go(func() error {
			err := c.TerminateWorkflow(gctx, id, "", "ferry-bench: the run is over")
			var notFound *serviceerror.NotFound
			switch {
			case errors.As(err, &notFound):
				return nil // completed already
			case err != nil:
				return fmt.Errorf("terminate %s: %w", id, err)
			}
			mu.Lock()
			closed++
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	return closed, err
}
