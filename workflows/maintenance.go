package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Maintenance names: wire contract, never rename.
const (
	// RetentionWorkflowName purges delivered rows (RetentionInput). Run by
	// the schedule RetentionScheduleID, so exactly one runner exists however
	// many Ferry processes run.
	RetentionWorkflowName = "ferry.Retention"
	RetentionScheduleID   = "ferry-retention"
	PurgeActivity         = "ferry.PurgeOutbox"

	// ReconcileWorkflowName re-dispatches rows whose aggregate workflow is
	// gone (ReconcileInput), run by the schedule
	// "<ReconcileScheduleID>/<task queue>".
	ReconcileWorkflowName = "ferry.Reconcile"
	ReconcileScheduleID   = "ferry-reconcile"
	ReconcileActivity     = "ferry.ReconcileDispatches"
)

// Defaults of the maintenance inputs.
const (
	DefaultRowRetention     = 30 * 24 * time.Hour
	DefaultReconcileAfter   = 10 * time.Minute
	DefaultPurgeBatch       = 1000
	DefaultRetentionEvery   = time.Hour
	DefaultReconcileEvery   = 5 * time.Minute
	maintenanceActivityTime = 30 * time.Minute
)

// RetentionInput says what the retention run deletes.
type RetentionInput struct {
	// RowAge: published or skipped rows whose delivery is older are deleted.
	// Zero means DefaultRowRetention.
	RowAge time.Duration `json:"row_age,omitempty"`
	// PayloadAge, when set and shorter than RowAge, replaces the payload of
	// delivered rows older than it with JSON null, keeping the event's
	// identity and timestamps for audit until RowAge.
	PayloadAge time.Duration `json:"payload_age,omitempty"`
	// BatchSize rows per statement, at most 1000 (the default).
	BatchSize int `json:"batch_size,omitempty"`
}

// RetentionResult reports a retention run.
type RetentionResult struct {
	Deleted        int64 `json:"deleted"`
	PayloadsPurged int64 `json:"payloads_purged"`
	Batches        int   `json:"batches"`
}

// ReconcileInput says which dispatched rows count as stuck.
type ReconcileInput struct {
	// OlderThan: rows dispatched longer ago and still not delivered are
	// checked. Zero means DefaultReconcileAfter.
	OlderThan time.Duration `json:"older_than,omitempty"`
}

// ReconcileResult reports what the reconciler found and did.
type ReconcileResult struct {
	// Checked aggregates with stuck dispatched rows.
	Checked int `json:"checked"`
	// Redispatched rows set back to pending because their aggregate
	// workflow was not running.
	Redispatched int64 `json:"redispatched"`
	// Aggregates (workflow ids) whose rows were re-dispatched.
	Aggregates []string `json:"aggregates,omitempty"`
}

var maintenanceOptions = workflow.ActivityOptions{
	StartToCloseTimeout: maintenanceActivityTime,
	HeartbeatTimeout:    time.Minute,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    5 * time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    5 * time.Minute,
		MaximumAttempts:    5,
	},
}

// Retention deletes delivered rows in bounded batches (the activity
// heartbeats its progress, visible on the pending activity in the UI).
func Retention(ctx workflow.Context, in RetentionInput) (RetentionResult, error) {
	var res RetentionResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, maintenanceOptions), PurgeActivity, in).Get(ctx, &res)
	return res, err
}

// Reconcile re-dispatches rows whose aggregate workflow is not running.
func Reconcile(ctx workflow.Context, in ReconcileInput) (ReconcileResult, error) {
	var res ReconcileResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, maintenanceOptions), ReconcileActivity, in).Get(ctx, &res)
	if err == nil && res.Redispatched > 0 {
		workflow.GetLogger(ctx).Warn("re-dispatched rows of aggregates whose workflow was gone",
			"rows", res.Redispatched, "aggregates", res.Aggregates)
	}
	return res, err
}
