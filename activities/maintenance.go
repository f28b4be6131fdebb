package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/relaydb"
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
	cfg.Metrics.KnownDriftKinds(workflows.DriftWorkflowGone, workflows.DriftWorkflowBehind, workflows.DriftWorkflowAhead,
		workflows.DriftSignalLost, workflows.DriftBelowCursor)
	return &Maintenance{pool: cfg.Pool, temporal: cfg.Temporal, maintenance: cfg.Metrics}, nil
}

// Register registers the maintenance activities under their wire names.
func (a *Maintenance) Register(r Registry) {
	r.RegisterActivityWithOptions(a.PurgeOutbox, activity.RegisterOptions{Name: workflows.PurgeActivity})
	r.RegisterActivityWithOptions(a.ReconcileDispatches, activity.RegisterOptions{Name: workflows.ReconcileActivity})
	r.RegisterActivityWithOptions(a.CheckDrift, activity.RegisterOptions{Name: workflows.DriftActivity})
}

// PurgeOutbox deletes delivered rows older than RowAge (and then blanks
// payloads older than PayloadAge), in batches of at most 1000 rows,
// heartbeating its progress. It first counts the rows past RowAge and
// records the count in ferry_maintenance, and records its success there at
// the end: /metrics reports both, so a retention that fails, waits on a
// lock or no longer runs shows (FerryRetentionStalled).
func (a *Maintenance) PurgeOutbox(ctx context.Context, in workflows.RetentionInput) (workflows.RetentionResult, error) {
	var res workflows.RetentionResult
	rowAge := cmp.Or(in.RowAge, workflows.DefaultRowRetention)
	batch := cmp.Or(in.BatchSize, workflows.DefaultPurgeBatch)
	if batch < 1 || batch > workflows.DefaultPurgeBatch {
		batch = workflows.DefaultPurgeBatch
	}
	// One scan of the table per run (published_at has no index): before
	// the deletes, so that a run that cannot delete still says how many
	// rows wait for it.
	if _, err := relaydb.CountOverdue(ctx, a.pool, rowAge); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			err = errors.New("ferry_maintenance has no 'retention' row: run `ferry migrate`")
		}
		return res, fmt.Errorf("count rows past retention: %w", err)
	}
	// Each call handles at most one batch and commits on its own, so no
	// long transaction holds back vacuum. what names the step in errors,
	// step in ferry_retention_rows_total.
	run := func(once func(context.Context, relaydb.Execer, time.Duration, int) (int64, error), age time.Duration, count *int64, what, step string) error {
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
	if err := run(relaydb.DeleteDelivered, rowAge, &res.Deleted, "delete delivered rows", metrics.StepDelete); err != nil {
		return res, err
	}
	if in.PayloadAge > 0 && in.PayloadAge < rowAge {
		if err := run(relaydb.PurgePayloads, in.PayloadAge, &res.PayloadsPurged, "purge payloads", metrics.StepPurgePayloads); err != nil {
			return res, err
		}
	}
	if err := relaydb.RetentionSucceeded(ctx, a.pool); err != nil {
		return res, fmt.Errorf("record the retention run: %w", err)
	}
	return res, nil
}

// ReconcileDispatches finds aggregates with rows dispatched more than
// OlderThan ago and still not delivered, and sets those rows back to
// pending when no open run of the aggregate's workflow holds them; the
// poller then signals them again, to a new run that resumes from the
// delivered version, or to the open run. Two cases qualify:
//
//   - the workflow has no open run (terminated, failed, timed out,
//     completed, reset away, lost with a namespace): all its stuck rows;
//   - its open run's state (query "ferry.state") neither holds some rows
//     nor has delivered them, and either they were dispatched before the
//     run started (a later event started it once the run they were
//     signalled to had ended) or the run has taken every signal it got
//     (State.Unread is 0), so their signals went to a run that ended,
//     whenever the rows were marked (a run that died between Temporal
//     taking a signal and the mark): those rows. The run waits for them
//     for ever otherwise.
//
// Rows an open run may hold are left alone: those it holds, those
// dispatched after it started while it has signals it has not taken (a
// blocked run without MaxBlockedRefs leaves them in its channel, or a
// worker from before State.Unread answered), and all of them when it does
// not answer the query (Temporal answers a query only once the run has
// taken what was signalled before it, so a signal Temporal accepted is in
// the answer, held or unread). Every update
// is conditional on the dispatch the pass looked at (status dispatched,
// dispatched before the pass's cut-off), so a row re-dispatched meanwhile
// is never touched; a repeat signal to a run that holds a row is dropped
// as a duplicate.
func (a *Maintenance) ReconcileDispatches(ctx context.Context, in workflows.ReconcileInput) (workflows.ReconcileResult, error) {
	var res workflows.ReconcileResult
	age := cmp.Or(in.OlderThan, workflows.DefaultReconcileAfter)
	if a.temporal == nil {
		return res, temporal.NewNonRetryableApplicationError(
			"this worker's activities have no Temporal client (activities.MaintenanceConfig.Temporal)", "Misconfigured", nil)
	}
	if err := a.takeBack(ctx, age, &res); err != nil {
		return res, err
	}
	stuck, before, err := relaydb.StuckAggregates(ctx, a.pool, age)
	if err != nil {
		return res, fmt.Errorf("find stuck dispatches: %w", err)
	}
	log := activity.GetLogger(ctx)
	for _, ag := range stuck {
		res.Checked++
		wfID := workflows.WorkflowID(ag.Type, ag.ID)
		n, cause, err := a.reconcileAggregate(ctx, ag, wfID, before, &res)
		if err != nil {
			return res, err
		}
		if n > 0 {
			res.Redispatched += n
			res.Aggregates = append(res.Aggregates, wfID)
			a.maintenance.Reconciled(cause, n)
		}
		activity.RecordHeartbeat(ctx, res.Checked)
	}
	if res.Unchecked > 0 {
		log.Warn("reconciler: open runs did not answer their state query; their stuck rows wait for the next pass (is a worker polling the task queue?)",
			"unchecked", res.Unchecked)
	}
	return res, nil
}

// takeBack gives aggregates back to the publish-first lane whose owning
// workflow has no open run (terminated, timed out, failed, reset away)
// and so will never release them: the owner row goes, the rows dispatched
// to the workflow are pending again, and the lane publishes them.
// Aggregates owned for less than age, or handed rows within age (a
// dispatch ends within the poller's lease, far less: a start in flight
// may be about to open a new run), are not taken back; an open run keeps
// its aggregate, however long.
func (a *Maintenance) takeBack(ctx context.Context, age time.Duration, res *workflows.ReconcileResult) error {
	owned, err := relaydb.WorkflowOwnedSince(ctx, a.pool, age, 1000)
	if err != nil {
		return fmt.Errorf("find aggregates workflows own: %w", err)
	}
	log := activity.GetLogger(ctx)
	for _, o := range owned {
		wfID := workflows.WorkflowID(o.Type, o.ID)
		cctx, cancel := context.WithTimeout(ctx, driftCallTimeout)
		d, err := a.temporal.DescribeWorkflowExecution(cctx, wfID, "")
		cancel()
		var notFound *serviceerror.NotFound
		status := "not found"
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			return fmt.Errorf("describe %s: %w", wfID, err)
		case d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			continue
		default:
			status = d.GetWorkflowExecutionInfo().GetStatus().String()
		}
		took, rows, err := relaydb.TakeBack(ctx, a.pool, o.Type, o.ID, o.Epoch, age, fmt.Sprintf(
			"re-queued by the reconciler: workflow %s owned the aggregate (epoch %d) but was %s, so it gave the aggregate back to the publish-first lane",
			wfID, o.Epoch, status))
		if err != nil {
			return fmt.Errorf("take %s back: %w", wfID, err)
		}
		if !took {
			continue
		}
		res.TakenBack = append(res.TakenBack, wfID)
		a.maintenance.TakenBack(rows)
		log.Warn("reconciler: took an aggregate back from a workflow that owned it without an open run; the publish-first lane publishes it again",
			"workflow_id", wfID, "status", status, "epoch", o.Epoch, "owned_since", o.Since, "rows_requeued", rows)
		activity.RecordHeartbeat(ctx, len(res.TakenBack))
	}
	return nil
}

// reconcileAggregate re-dispatches the rows of one aggregate that no open
// run holds (see ReconcileDispatches) and returns how many, and why.
func (a *Maintenance) reconcileAggregate(ctx context.Context, ag relaydb.AggregateKey, wfID string, before time.Time, res *workflows.ReconcileResult) (int64, string, error) {
	log := activity.GetLogger(ctx)
	cctx, cancel := context.WithTimeout(ctx, driftCallTimeout)
	defer cancel()
	d, err := a.temporal.DescribeWorkflowExecution(cctx, wfID, "")
	var notFound *serviceerror.NotFound
	status := "not found"
	switch {
	case errors.As(err, &notFound):
	case err != nil:
		return 0, "", fmt.Errorf("describe %s: %w", wfID, err)
	case d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return a.reconcileOpenRun(ctx, ag, wfID, d.GetWorkflowExecutionInfo(), before, res)
	default:
		status = d.GetWorkflowExecutionInfo().GetStatus().String()
	}
	n, err := relaydb.RedispatchAggregate(ctx, a.pool, ag.Type, ag.ID, before,
		fmt.Sprintf("re-dispatched by the reconciler: workflow %s was %s while this row was dispatched", wfID, status))
	if err != nil {
		return 0, "", fmt.Errorf("re-dispatch %s: %w", wfID, err)
	}
	if n > 0 {
		log.Warn("reconciler: re-dispatched rows whose workflow has no open run",
			"workflow_id", wfID, "status", status, "rows", n)
	}
	return n, metrics.ReconcileNotRunning, nil
}

// reconcileOpenRun re-dispatches the aggregate's stuck rows that its open
// run neither holds nor has delivered, and that it cannot have unread:
// they were signalled to a run that ended.
func (a *Maintenance) reconcileOpenRun(ctx context.Context, ag relaydb.AggregateKey, wfID string, run *workflowpb.WorkflowExecutionInfo, before time.Time, res *workflows.ReconcileResult) (int64, string, error) {
	rows, err := relaydb.StuckRows(ctx, a.pool, ag.Type, ag.ID, before)
	if err != nil {
		return 0, "", fmt.Errorf("read stuck rows of %s: %w", wfID, err)
	}
	if len(rows) == 0 {
		return 0, "", nil
	}
	// The current run, not necessarily the one described: a run it
	// continued as new from carries the held references in its input (and
	// takes every signal before it continues), and any run is younger than
	// the rows dispatched before the described one started.
	runID := run.GetExecution().GetRunId()
	st, err := a.queryState(ctx, wfID)
	if err != nil {
		res.Unchecked++
		activity.GetLogger(ctx).Warn("reconciler: query workflow state", "workflow_id", wfID, "run_id", runID, "error", err)
		return 0, "", nil
	}
	rows, allRead := notUnread(rows, run.GetStartTime().AsTime(), st.Unread)
	msg := "re-dispatched by the reconciler: the open run of workflow %s (run %s) started after this row was dispatched and does not hold it (the run it was signalled to ended)"
	if allRead {
		msg = "re-dispatched by the reconciler: the open run of workflow %s (run %s) does not hold this row and has taken every signal it got (the run it was signalled to ended)"
	}
	ids, lost := notHeld(rows, st)
	if len(ids) == 0 {
		return 0, "", nil
	}
	n, err := relaydb.RedispatchRows(ctx, a.pool, ids, before, fmt.Sprintf(msg, wfID, runID))
	if err != nil {
		return 0, "", fmt.Errorf("re-dispatch %s: %w", wfID, err)
	}
	if n > 0 {
		activity.GetLogger(ctx).Warn("reconciler: re-dispatched rows the open run does not hold (signalled to a run that ended)",
			"workflow_id", wfID, "run_id", runID, "versions", versions(lost), "rows", n,
			"run_delivered", st.Delivered, "run_pending", versions(st.Pending))
	}
	return n, metrics.ReconcileNotHeld, nil
}

// notUnread picks the rows whose signal the open run cannot have left
// unread: all of them when the run has taken every signal it got (unread
// is 0; allRead), else only those dispatched before the run started. A row
// dispatched after it started may sit in its signal channel (a blocked run
// without MaxBlockedRefs leaves them there; a nil unread is a worker from
// before State.Unread); a row is marked dispatched after Temporal accepted
// its signal, so one marked before the run started was signalled to an
// earlier run. (dispatched_at is PostgreSQL's clock, the start time
// Temporal's.) Pure, for a table test.
func notUnread(rows []relaydb.StuckRow, started time.Time, unread *int) (out []relaydb.StuckRow, allRead bool) {
	if unread != nil && *unread == 0 {
		return rows, true
	}
	return slices.DeleteFunc(rows, func(r relaydb.StuckRow) bool { return !r.DispatchedAt.Before(started) }), false
}

// notHeld picks the rows a run's state neither holds (pending, being
// published) nor has delivered (a version at or below its cursor is
// dropped as a duplicate: re-dispatching it would achieve nothing). Pure,
// for a table test.
func notHeld(rows []relaydb.StuckRow, st workflows.State) (ids []string, vs []int64) {
	for _, r := range rows {
		if r.Version > st.Delivered && r.Version != st.Publishing && !slices.Contains(st.Pending, r.Version) {
			ids = append(ids, r.ID)
			vs = append(vs, r.Version)
		}
	}
	return ids, vs
}

// queryState asks the current run of a workflow for its state (query
// "ferry.state"), bounded by driftCallTimeout.
func (a *Maintenance) queryState(ctx context.Context, id string) (workflows.State, error) {
	var st workflows.State
	ctx, cancel := context.WithTimeout(ctx, driftCallTimeout)
	defer cancel()
	v, err := a.temporal.QueryWorkflow(ctx, id, "", workflows.StateQuery)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}
