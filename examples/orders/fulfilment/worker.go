package fulfilment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Config configures the fulfilment worker.
type Config struct {
	// TaskQueue of the Fulfilment workflows and their activity: the
	// example's own, not Ferry's (Routes names it in the start route).
	// Default "orders-fulfilment".
	TaskQueue string
}

// WithDefaults fills the defaults.
func (c Config) WithDefaults() Config {
	c.TaskQueue = cmp.Or(c.TaskQueue, "orders-fulfilment")
	return c
}

// Routes are the Ferry destinations (ferry.Config.Destinations) that drive
// the fulfilment of orders: order.created starts an order's Fulfilment on
// taskQueue, order.paid signals it. Both name the workflow by the order's
// id, so the start of a repeat finds the run there, and the signal reaches
// the run the start made.
func Routes(taskQueue string) []string {
	return []string{
		"order.created=start:fulfilment,type=" + WorkflowName + ",queue=" + taskQueue + ",id=fulfilment-{aggregate_id}",
		"order.paid=signal:fulfilment,id=fulfilment-{aggregate_id},signal=" + SignalPaid,
	}
}

// Worker hosts Workflow and its activity on Config.TaskQueue.
type Worker struct {
	w    worker.Worker
	stop sync.Once
}

// NewWorker registers the workflow and its activity on a Temporal worker
// of the client; nothing polls until Start.
func NewWorker(cfg Config, c client.Client, pool *pgxpool.Pool) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if c == nil {
		return nil, errors.New("fulfilment: the Temporal client is nil")
	}
	acts, err := NewActivities(pool)
	if err != nil {
		return nil, err
	}
	w := worker.New(c, cfg.TaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	w.RegisterActivityWithOptions(acts.MarkFulfilling, activity.RegisterOptions{Name: MarkFulfillingActivity})
	return &Worker{w: w}, nil
}

// Start starts polling and returns.
func (w *Worker) Start(context.Context) error {
	if err := w.w.Start(); err != nil {
		return fmt.Errorf("fulfilment: start worker: %w", err)
	}
	return nil
}

// Stop waits for running tasks to finish; a second Stop does nothing.
func (w *Worker) Stop() { w.stop.Do(w.w.Stop) }
