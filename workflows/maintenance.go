package workflows

import (
	"cmp"
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

	// ReconcileWorkflowName re-dispatches rows no open run of their
	// aggregate's workflow holds (ReconcileInput), run by the schedule
	// "<ReconcileScheduleID>/<task queue>".
	ReconcileWorkflowName = "ferry.Reconcile"
	ReconcileScheduleID   = "ferry-reconcile"
	ReconcileActivity     = "ferry.ReconcileDispatches"

	// DriftActivity compares a sample of aggregates' outbox rows with their
	// workflows' state (DriftInput, DriftResult); the Reconcile workflow
	// runs it after its repair pass.
	DriftActivity = "ferry.CheckDrift"
)

// Kinds of drift between the outbox tables and the aggregate workflows
// (Drift.Kind, the label of ferry_drift_found_total).
const (
	// DriftWorkflowGone: rows are dispatched (or quarantined) but the
	// aggregate's workflow is not running. The reconciler repairs
	// dispatched rows once they are older than ReconcileInput.OlderThan.
	DriftWorkflowGone = "workflow_gone"
	// DriftWorkflowBehind: outbox_aggregates.delivered_version is ahead of
	// the running workflow's delivered version (and of the version it is
	// publishing): the workflow would wait for versions the table says are
	// delivered.
	DriftWorkflowBehind = "workflow_behind"
	// DriftWorkflowAhead: the running workflow has delivered more than
	// delivered_version says; a new run would resume from the table and
	// publish those versions again.
	DriftWorkflowAhead = "workflow_ahead"
	// DriftSignalLost: rows are dispatched to a running workflow that does
	// not hold them (not pending, not being published, above its delivered
	// version): the signal did not reach this run. The reconciler repairs
	// those dispatched before the run started (a run that ended held
	// them) once they are older than ReconcileInput.OlderThan.
	DriftSignalLost = "signal_lost"
	// DriftBelowCursor: rows at or below delivered_version are still
	// pending or dispatched; no run will publish them (each resumes after
	// delivered_version and drops lower versions as duplicates).
	DriftBelowCursor = "below_cursor"
	// DriftOwnerWithoutRun: the publish-first lane handed the aggregate to
	// its workflow, which has no open run: nothing publishes it until the
	// reconciler takes it back (ReconcileInput.OlderThan after the
	// handoff).
	DriftOwnerWithoutRun = "owner_without_run"
	// DriftStaleEpoch: a row was marked published under an older ownership
	// epoch than an earlier version of the aggregate: a party that had lost
	// the aggregate marked it (two publishers overlapped). The fences
	// refuse such marks, so this says something bypassed them.
	DriftStaleEpoch = "stale_epoch"
)

// Defaults of the maintenance inputs.
const (
	DefaultRowRetention   = 30 * 24 * time.Hour
	DefaultReconcileAfter = 10 * time.Minute
	DefaultPurgeBatch     = 1000
	DefaultRetentionEvery = time.Hour
	DefaultReconcileEvery = 5 * time.Minute
	DefaultDriftSample    = 50
	DefaultDriftGrace     = time.Minute
	DefaultDriftSettle    = 5 * time.Second
	// MaxDriftSample bounds DriftInput.Sample: each sampled aggregate
	// costs two small queries and two Temporal calls.
	MaxDriftSample          = 1000
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
	// DriftSample aggregates, the most recently active, are compared with
	// their workflows' state after the repair pass. Zero means
	// DefaultDriftSample (50), negative turns the check off; at most
	// MaxDriftSample.
	DriftSample int `json:"drift_sample,omitempty"`
	// DriftGrace: rows dispatched more recently are not judged (a signal
	// and its mark are not atomic). Zero means DefaultDriftGrace (1m).
	DriftGrace time.Duration `json:"drift_grace,omitempty"`
	// DriftSettle is the wait before a suspect aggregate is looked at
	// again; only drift seen twice is reported, so a publish in flight is
	// not. Zero means DefaultDriftSettle (5s).
	DriftSettle time.Duration `json:"drift_settle,omitempty"`
}

// ReconcileResult reports what the reconciler found and did.
type ReconcileResult struct {
	// Checked aggregates with stuck dispatched rows.
	Checked int `json:"checked"`
	// Redispatched rows set back to pending because no open run of their
	// aggregate's workflow holds them: it has no open run, or the open one
	// started after they were dispatched and does not hold them.
	Redispatched int64 `json:"redispatched"`
	// Aggregates (workflow ids) whose rows were re-dispatched.
	Aggregates []string `json:"aggregates,omitempty"`
	// Unchecked aggregates have an open run that started after some of
	// their stuck rows were dispatched but did not answer its state query
	// (no worker polls its task queue, or a timeout): left alone until the
	// next run.
	Unchecked int `json:"unchecked,omitempty"`
	// Drift is the sampling check's report (nil when it was off, or in
	// runs recorded before it existed).
	Drift *DriftResult `json:"drift,omitempty"`
	// TakenBack are aggregates (workflow ids) the publish-first lane's
	// workflows owned without an open run: the reconciler gave them back
	// to the lane, with the rows dispatched to them.
	TakenBack []string `json:"taken_back,omitempty"`
}

// DriftInput is DriftActivity's input (see ReconcileInput for the
// defaults).
type DriftInput struct {
	Sample int           `json:"sample"`
	Grace  time.Duration `json:"grace"`
	Settle time.Duration `json:"settle"`
	// ReconcileAfter is the reconciler's OlderThan, named in the advice.
	ReconcileAfter time.Duration `json:"reconcile_after"`
}

// DriftResult reports one drift check.
type DriftResult struct {
	// Sampled aggregates compared.
	Sampled int `json:"sampled"`
	// Unchecked aggregates whose workflow did not answer (no worker polls
	// its task queue, or a timeout): neither healthy nor drifted.
	Unchecked int `json:"unchecked"`
	// Drifted aggregates, each seen twice, DriftSettle apart.
	Drifted []Drift `json:"drifted,omitempty"`
}

// Drift is one aggregate whose rows and workflow disagree.
type Drift struct {
	WorkflowID string `json:"workflow_id"`
	Kind       string `json:"kind"`
	// Differs says what the table and the workflow each say.
	Differs string `json:"differs"`
	// Action says what to do (or that the reconciler does it).
	Action string `json:"action"`
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

// Reconcile re-dispatches rows no open run of their aggregate's workflow
// holds (activities.Maintenance.ReconcileDispatches says when), then compares a sample of aggregates' rows with their workflows' state
// and reports drift: one warning per drifted aggregate, saying what
// differs and what to do, and the list in the result.
func Reconcile(ctx workflow.Context, in ReconcileInput) (ReconcileResult, error) {
	var res ReconcileResult
	actx := workflow.WithActivityOptions(ctx, maintenanceOptions)
	logger := workflow.GetLogger(ctx)
	err := workflow.ExecuteActivity(actx, ReconcileActivity, in).Get(ctx, &res)
	if err != nil {
		return res, err
	}
	if res.Redispatched > 0 {
		// A log line is no command: recorded histories replay either way.
		logger.Warn("re-dispatched rows no open run of their aggregate workflow held",
			"rows", res.Redispatched, "aggregates", res.Aggregates)
	}
	// Runs that started before the drift check existed end here.
	if workflow.GetVersion(ctx, "drift-check", workflow.DefaultVersion, 1) == workflow.DefaultVersion || in.DriftSample < 0 {
		return res, nil
	}
	var drift DriftResult
	if err := workflow.ExecuteActivity(actx, DriftActivity, in.driftInput()).Get(ctx, &drift); err != nil {
		return res, err
	}
	res.Drift = &drift
	for _, d := range drift.Drifted {
		logger.Warn("drift between the outbox and an aggregate workflow",
			"workflow_id", d.WorkflowID, "kind", d.Kind, "differs", d.Differs, "action", d.Action)
	}
	if drift.Unchecked > 0 {
		logger.Warn("drift check: some workflows did not answer their state query; is a worker polling the task queue?",
			"unchecked", drift.Unchecked, "sampled", drift.Sampled)
	}
	return res, nil
}

func (in ReconcileInput) driftInput() DriftInput {
	return DriftInput{
		Sample:         min(cmp.Or(in.DriftSample, DefaultDriftSample), MaxDriftSample),
		Grace:          cmp.Or(in.DriftGrace, DefaultDriftGrace),
		Settle:         cmp.Or(in.DriftSettle, DefaultDriftSettle),
		ReconcileAfter: cmp.Or(in.OlderThan, DefaultReconcileAfter),
	}
}
