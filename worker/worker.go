package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/workflows"
)

// Config configures a Worker.
type Config struct {
	// Temporal is the client the worker polls with. Required.
	Temporal client.Client
	// Activities to host. Required.
	Activities *activities.Activities
	// Workflow are the aggregate workflow's settings: idle timeout,
	// history length, batch size, blocked-reference bound and policies by
	// event type. This worker owns them: it answers every run of
	// workflows.Revision2 or later with them at the run's start (fresh or
	// continued as new), so a change here reaches aggregates already
	// running at their next run or continue-as-new (workflows.Settings
	// says exactly when). Give every worker of a task queue the same.
	// Default: each field's default (workflows.Settings).
	Workflow workflows.Settings
	// TaskQueue; must match the poller's. Default "ferry".
	TaskQueue string
	// Namespace the client is connected to, where Start checks that Ferry's
	// search attributes are registered. Default "default".
	Namespace string
	// Schedules, when set, are created or updated by Start: retention and
	// the reconciler. Default nil: this worker leaves schedules alone.
	Schedules *Schedules
	// SkipSearchAttributeCheck skips that check (for a worker whose
	// namespace is known to have them). Default false.
	SkipSearchAttributeCheck bool
	// MaxConcurrentActivities bounds publishes in flight. Default 64.
	MaxConcurrentActivities int
	// WorkflowTaskPollers is how many long polls for workflow tasks the
	// worker keeps open. Every signalled aggregate needs a workflow task,
	// so with many aggregates this, not the activities, bounds throughput.
	// Default 8.
	WorkflowTaskPollers int
	// Effects register effect workflows and their activities on the
	// worker: effects.Workflows{} for the built-in Payment and Email
	// workflows, the payment and email Activities, and users' own.
	// Default: none.
	Effects []Registrar
}

// Registrar registers workflows and activities of its own on a worker.
type Registrar interface {
	Register(r sdkworker.Registry)
}

// Worker is a started-on-demand Temporal worker.
type Worker struct {
	cfg Config

	mu      sync.Mutex
	w       sdkworker.Worker
	started bool // Start was called, whether or not it succeeded
	stopped bool
}

// Defaults and limits of Config, which package ferry's Config takes too.
const (
	DefaultMaxConcurrentActivities = 64
	DefaultWorkflowTaskPollers     = 8
	// MinWorkflowTaskPollers: the SDK needs two, one for the task queue,
	// one for the sticky queue.
	MinWorkflowTaskPollers = 2
)

// New validates cfg and registers the workflow and activities.
func New(cfg Config) (*Worker, error) {
	cfg.TaskQueue = cmp.Or(cfg.TaskQueue, workflows.DefaultTaskQueue)
	cfg.Namespace = cmp.Or(cfg.Namespace, client.DefaultNamespace)
	cfg.MaxConcurrentActivities = cmp.Or(cfg.MaxConcurrentActivities, DefaultMaxConcurrentActivities)
	cfg.WorkflowTaskPollers = cmp.Or(cfg.WorkflowTaskPollers, DefaultWorkflowTaskPollers)
	switch {
	case cfg.Temporal == nil:
		return nil, errors.New("worker: Config.Temporal is nil")
	case cfg.Activities == nil:
		return nil, errors.New("worker: Config.Activities is nil")
	case cfg.MaxConcurrentActivities < 1:
		return nil, fmt.Errorf("worker: Config.MaxConcurrentActivities %d: must be at least 1", cfg.MaxConcurrentActivities)
	case cfg.WorkflowTaskPollers < MinWorkflowTaskPollers:
		return nil, fmt.Errorf("worker: Config.WorkflowTaskPollers %d: must be at least %d", cfg.WorkflowTaskPollers, MinWorkflowTaskPollers)
	}
	if err := cfg.Workflow.Validate(); err != nil {
		return nil, fmt.Errorf("worker: Config.Workflow: %w", err)
	}
	w := sdkworker.New(cfg.Temporal, cfg.TaskQueue, sdkworker.Options{
		MaxConcurrentActivityExecutionSize: cfg.MaxConcurrentActivities,
		MaxConcurrentWorkflowTaskPollers:   cfg.WorkflowTaskPollers,
		// Stop lets running publishes finish (one takes well under a
		// second); anything still running after this is retried by Temporal.
		WorkerStopTimeout: 10 * time.Second,
		// A workflow that panics or meets non-determinism after a deploy
		// stays blocked (and visible) instead of failing: fix the code,
		// redeploy, and it carries on.
		WorkflowPanicPolicy: sdkworker.BlockWorkflow,
	})
	Register(w, cfg.Activities, cfg.Workflow)
	RegisterEffects(w, cfg.Effects...)
	return &Worker{cfg: cfg, w: w}, nil
}

// Register registers Ferry's workflow and activities on r under their wire
// names, the publish activities answering runs with settings (validate them
// first: workflows.Settings.Validate). Use it to host them in a worker of
// your own.
func Register(r sdkworker.Registry, acts *activities.Activities, settings workflows.Settings) {
	r.RegisterWorkflowWithOptions(workflows.Aggregate, workflow.RegisterOptions{Name: workflows.AggregateWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.Replay, workflow.RegisterOptions{Name: workflows.ReplayWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.Retention, workflow.RegisterOptions{Name: workflows.RetentionWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.Reconcile, workflow.RegisterOptions{Name: workflows.ReconcileWorkflowName})
	acts.Register(r, settings)
}

// RegisterEffects registers effect workflows and activities on r, for a
// worker of your own that hosts Ferry's effects.
func RegisterEffects(r sdkworker.Registry, effects ...Registrar) {
	for _, e := range effects {
		e.Register(r)
	}
}

// TaskQueue is the queue the worker polls.
func (w *Worker) TaskQueue() string { return w.cfg.TaskQueue }

// Start checks that the namespace has Ferry's search attributes (a
// workflow that sets unregistered ones would stall on every task), starts
// polling and returns. A Worker cannot be started again after Stop.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		// The SDK panics when a stopped worker is started.
		return fmt.Errorf("start worker on task queue %q: already stopped", w.cfg.TaskQueue)
	}
	if !w.cfg.SkipSearchAttributeCheck {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := EnsureSearchAttributes(cctx, w.cfg.Temporal, w.cfg.Namespace, false)
		cancel()
		if err != nil {
			return fmt.Errorf("start worker on task queue %q: %w", w.cfg.TaskQueue, err)
		}
	}
	if w.cfg.Schedules != nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := EnsureSchedules(cctx, w.cfg.Temporal, w.cfg.TaskQueue, *w.cfg.Schedules)
		cancel()
		if err != nil {
			return fmt.Errorf("start worker on task queue %q: %w", w.cfg.TaskQueue, err)
		}
	}
	w.started = true
	if err := w.w.Start(); err != nil {
		return fmt.Errorf("start worker on task queue %q: %w", w.cfg.TaskQueue, err)
	}
	return nil
}

// Stop stops polling and waits for running activities to finish (up to the
// SDK's stop timeout; what is cut off is retried by Temporal). Safe to call
// more than once, and without Start.
func (w *Worker) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	if !w.started {
		// The SDK's Stop would still call ShutdownWorker on the server (up
		// to its 10s RPC timeout) for a worker that never polled.
		return
	}
	w.w.Stop()
}
