package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// MaintenanceConfig configures Maintenance.
type MaintenanceConfig struct {
	// Pool reaches the outbox tables. Required.
	Pool *pgxpool.Pool
	// Temporal lets the reconciler and the drift check ask about an
	// aggregate's workflow. Without it those two fail (non-retryable);
	// retention runs.
	Temporal client.Client
	// Metrics counts retention, reconciler and drift-check work; nil counts
	// nothing.
	Metrics *metrics.Maintenance
}

// Maintenance holds the scheduled work on the outbox: retention
// (PurgeOutbox), the reconciler (ReconcileDispatches) and the drift check
// (CheckDrift).
type Maintenance struct {
	pool        *pgxpool.Pool
	temporal    client.Client
	maintenance *metrics.Maintenance
}

// NewMaintenance validates cfg.
func NewMaintenance(cfg MaintenanceConfig) (*Maintenance, error) {
	if cfg.Pool == nil {
		return nil, errors.New("activities: MaintenanceConfig.Pool is nil")
	}
	return &Maintenance{pool: cfg.Pool, temporal: cfg.Temporal, maintenance: cfg.Metrics}, nil
}

// Register registers the maintenance activities under their wire names.
func (a *Maintenance) Register(r Registry) {
	r.RegisterActivityWithOptions(a.PurgeOutbox, activity.RegisterOptions{Name: workflows.PurgeActivity})
	r.RegisterActivityWithOptions(a.ReconcileDispatches, activity.RegisterOptions{Name: workflows.ReconcileActivity})
	r.RegisterActivityWithOptions(a.CheckDrift, activity.RegisterOptions{Name: workflows.DriftActivity})
}

// PurgeOutbox deletes delivered rows older than RowAge (and first blanks
// payloads older than PayloadAge), in batches of at most 1000 rows,
// heartbeating its progress.
func (a *Maintenance) PurgeOutbox(ctx context.Context, in workflows.RetentionInput) (workflows.RetentionResult, error) {
	var res workflows.RetentionResult
	rowAge := cmp.Or(in.RowAge, workflows.DefaultRowRetention)
	batch := cmp.Or(in.BatchSize, workflows.DefaultPurgeBatch)
	if batch < 1 || batch > workflows.DefaultPurgeBatch {
		batch = workflows.DefaultPurgeBatch
	}
	// Each call handles at most one batch and commits on its own, so no
	// long transaction holds back vacuum. what names the step in errors,
	// step in ferry_retention_rows_total.
	run := func(once func(context.Context, outbox.Execer, time.Duration, int) (int64, error), age time.Duration, count *int64, what, step string) error {
		for {
			n, err := once(ctx, a.pool, age, batch)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			*count += n
			res.Batches++
			activity.RecordHeartbeat(ctx, res)
			a.maintenance.Retained(step, n)
			if n < int64(batch) {
				return nil
			}
		}
	}
	// Delete first: blanking payloads of rows about to go is wasted work.
	if err := run(outbox.DeleteDelivered, rowAge, &res.Deleted, "delete delivered rows", metrics.StepDelete); err != nil {
		return res, err
	}
	if in.PayloadAge > 0 && in.PayloadAge < rowAge {
		if err := run(outbox.PurgePayloads, in.PayloadAge, &res.PayloadsPurged, "purge payloads", metrics.StepPurgePayloads); err != nil {
			return res, err
		}
	}
	return res, nil
}

// ReconcileDispatches finds aggregates with rows dispatched long ago but not
// delivered, and sets those rows back to pending when the aggregate's
// workflow is not running (terminated, reset away, lost with a namespace):
// the poller then signals a new run, which resumes from the delivered
// version. A running workflow is left alone (it may wait for a gap or hold
// a quarantined event).
func (a *Maintenance) ReconcileDispatches(ctx context.Context, in workflows.ReconcileInput) (workflows.ReconcileResult, error) {
	var res workflows.ReconcileResult
	age := cmp.Or(in.OlderThan, workflows.DefaultReconcileAfter)
	stuck, err := outbox.StuckAggregates(ctx, a.pool, age)
	if err != nil {
		return res, fmt.Errorf("find stuck dispatches: %w", err)
	}
	if a.temporal == nil {
		return res, temporal.NewNonRetryableApplicationError(
			"this worker's activities have no Temporal client (activities.MaintenanceConfig.Temporal)", "Misconfigured", nil)
	}
	for _, ag := range stuck {
		res.Checked++
		wfID := workflows.WorkflowID(ag.Type, ag.ID)
		state := "not found"
		d, err := a.temporal.DescribeWorkflowExecution(ctx, wfID, "")
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			return res, fmt.Errorf("describe %s: %w", wfID, err)
		case d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			continue
		default:
			state = d.GetWorkflowExecutionInfo().GetStatus().String()
		}
		n, err := outbox.Redispatch(ctx, a.pool, ag.Type, ag.ID, age,
			fmt.Sprintf("reconciler: workflow %s was %s; re-dispatched", wfID, state))
		if err != nil {
			return res, fmt.Errorf("re-dispatch %s: %w", wfID, err)
		}
		if n > 0 {
			res.Redispatched += n
			res.Aggregates = append(res.Aggregates, wfID)
			a.maintenance.Reconciled(n)
		}
		activity.RecordHeartbeat(ctx, res.Checked)
	}
	return res, nil
}
