package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/workflows"
)

// The drift check (Maintenance.CheckDrift): the outbox tables compared
// with the workflows' state, for a sample of recently active aggregates.

// driftCallTimeout bounds one Temporal call of the drift check; a query
// waits for a worker of the workflow's task queue to answer it.
const driftCallTimeout = 10 * time.Second

// CheckDrift compares the most recently active aggregates' rows with their
// workflows' state (query "ferry.state") and reports the aggregates where
// they disagree. An aggregate that looks drifted is looked at again after
// Settle and reported only when the same kind of drift is seen again, so a
// publish in flight (the row is marked before the workflow hears back) is
// not reported.
func (a *Maintenance) CheckDrift(ctx context.Context, input workflows.DriftInput) (workflows.DriftResult, error) {
	in := driftInput{DriftInput: input}
	var res workflows.DriftResult
	if a.temporal == nil {
		return res, temporal.NewNonRetryableApplicationError(
			"this worker's activities have no Temporal client (activities.MaintenanceConfig.Temporal)", "Misconfigured", nil)
	}
	in.Sample = min(cmp.Or(in.Sample, workflows.DefaultDriftSample), workflows.MaxDriftSample)
	in.Grace = cmp.Or(in.Grace, workflows.DefaultDriftGrace)
	in.Settle = cmp.Or(in.Settle, workflows.DefaultDriftSettle)
	in.ReconcileAfter = cmp.Or(in.ReconcileAfter, workflows.DefaultReconcileAfter)

	sample, err := relaydb.RecentAggregates(ctx, a.pool, in.Sample)
	if err != nil {
		return res, fmt.Errorf("sample aggregates: %w", err)
	}
	lane, err := relaydb.FleetLane(ctx, a.pool)
	if err != nil {
		return res, fmt.Errorf("read the relays' lane: %w", err)
	}
	in.publishFirst = lane == poller.LanePublishFirst
	res.Sampled = len(sample)

	type suspect struct {
		key   relaydb.AggregateKey
		found []workflows.Drift
	}
	var suspects []suspect
	for i, k := range sample {
		found, ok, err := a.lookForDrift(ctx, k, in)
		if err != nil {
			return res, err
		}
		if !ok {
			res.Unchecked++
		} else if len(found) > 0 {
			suspects = append(suspects, suspect{k, found})
		}
		activity.RecordHeartbeat(ctx, i+1)
	}
	if len(suspects) > 0 {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(in.Settle):
		}
	}
	for _, s := range suspects {
		again, ok, err := a.lookForDrift(ctx, s.key, in)
		if err != nil {
			return res, err
		}
		if !ok {
			res.Unchecked++
			continue
		}
		for _, d := range again {
			if slices.ContainsFunc(s.found, func(f workflows.Drift) bool { return f.Kind == d.Kind }) {
				res.Drifted = append(res.Drifted, d)
				a.maintenance.DriftFound(d.Kind)
			}
		}
		activity.RecordHeartbeat(ctx, res.Sampled)
	}
	a.maintenance.DriftChecked(res.Sampled, res.Unchecked)
	return res, nil
}

// driftInput is the check's input with what the run found out once.
type driftInput struct {
	workflows.DriftInput
	// publishFirst: the relays run the publish-first lane, where an
	// aggregate that no workflow owns or holds rows of has no workflow to
	// ask.
	publishFirst bool
}

// lookForDrift reads the aggregate's rows, asks its workflow, and reads the
// rows again: the table moves first (a publish marks the row, then the
// workflow hears back), so the workflow is compared with the read before
// it where it may lag and with the read after it where it may not lead.
// ok is false when the workflow could not be asked.
func (a *Maintenance) lookForDrift(ctx context.Context, k relaydb.AggregateKey, in driftInput) (found []workflows.Drift, ok bool, err error) {
	before, exists, err := a.driftRows(ctx, k, in.Grace)
	if err != nil || !exists {
		return nil, true, err
	}
	if in.publishFirst && before.laneOnly() {
		// The publish-first lane's, with nothing a workflow holds: no
		// workflow to ask (most such aggregates never had one).
		return judgeDrift(k, before, driftWorkflow{id: workflows.WorkflowID(k.Type, k.ID), status: "not asked"}, before, in), true, nil
	}
	wf, ok := a.driftWorkflow(ctx, workflows.WorkflowID(k.Type, k.ID))
	if !ok {
		return nil, false, nil
	}
	after, exists, err := a.driftRows(ctx, k, in.Grace)
	if err != nil || !exists {
		return nil, true, err
	}
	return judgeDrift(k, before, wf, after, in), true, nil
}

// driftTable is what the outbox tables say about one aggregate.
type driftTable struct {
	delivered   int64
	dispatched  []int64 // dispatched longer than the grace ago
	quarantined []int64
	below       []int64 // pending or dispatched at or below delivered
	// owner: the aggregate's owner row (the publish-first lane), or nil.
	owner *relaydb.Owner
	// staleEpochs: versions marked under an older epoch than an earlier
	// version's.
	staleEpochs []int64
}

// laneOnly: no workflow owns the aggregate and none holds a row of it.
func (t driftTable) laneOnly() bool {
	return (t.owner == nil || t.owner.Owner != relaydb.OwnerWorkflow) && len(t.dispatched) == 0 && len(t.quarantined) == 0
}

func (a *Maintenance) driftRows(ctx context.Context, k relaydb.AggregateKey, grace time.Duration) (driftTable, bool, error) {
	r, found, err := relaydb.ReadDriftRows(ctx, a.pool, k.Type, k.ID, grace)
	if err != nil {
		return driftTable{}, false, fmt.Errorf("read rows of %s/%s: %w", k.Type, k.ID, err)
	}
	// Not found: deleted since the sample was taken.
	t := driftTable{delivered: r.Delivered, dispatched: r.Dispatched, quarantined: r.Quarantined, below: r.Below}
	if !found {
		return t, false, nil
	}
	o, owned, err := relaydb.OwnerOf(ctx, a.pool, k.Type, k.ID)
	if err != nil {
		return t, false, fmt.Errorf("read the owner of %s/%s: %w", k.Type, k.ID, err)
	}
	if owned {
		t.owner = &o
	}
	if t.staleEpochs, err = relaydb.StaleEpochs(ctx, a.pool, k.Type, k.ID, t.delivered); err != nil {
		return t, false, fmt.Errorf("read the epochs of %s/%s: %w", k.Type, k.ID, err)
	}
	return t, true, nil
}

// driftWorkflow is what Temporal says about the aggregate's workflow.
type driftWorkflow struct {
	id     string
	status string           // "Running", a closed status, or "not found"
	state  *workflows.State // when running
}

func (a *Maintenance) driftWorkflow(ctx context.Context, id string) (driftWorkflow, bool) {
	wf := driftWorkflow{id: id, status: "not found"}
	cctx, cancel := context.WithTimeout(ctx, driftCallTimeout)
	defer cancel()
	d, err := a.temporal.DescribeWorkflowExecution(cctx, id, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return wf, true
	case err != nil:
		activity.GetLogger(ctx).Warn("drift check: describe workflow", "workflow_id", id, "error", err)
		return wf, false
	}
	st := d.GetWorkflowExecutionInfo().GetStatus()
	if st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		wf.status = st.String()
		return wf, true
	}
	wf.status = "Running"
	state, err := a.queryState(ctx, id)
	if err != nil {
		activity.GetLogger(ctx).Warn("drift check: query workflow state", "workflow_id", id, "error", err)
		return wf, false
	}
	wf.state = &state
	return wf, true
}

// judgeDrift compares one aggregate's rows (read before and after asking
// its workflow) with the workflow. Pure, so every rule has a table test.
func judgeDrift(k relaydb.AggregateKey, before driftTable, wf driftWorkflow, after driftTable, in driftInput) []workflows.Drift {
	var out []workflows.Drift
	add := func(kind, differs, action string) {
		out = append(out, workflows.Drift{WorkflowID: wf.id, Kind: kind, Differs: differs, Action: action})
	}

	if len(before.below) > 0 && len(after.below) > 0 {
		add(workflows.DriftBelowCursor,
			fmt.Sprintf("rows %s are not published but outbox_aggregates.delivered_version is %d", versions(after.below), after.delivered),
			fmt.Sprintf("no run will publish them (each resumes after delivered_version). If they were delivered, mark them: "+
				"%s; if not, set delivered_version to %d and terminate the workflow (later versions are published again; consumers deduplicate)",
				relaydb.AdviceMarkPublished(k.Type, k.ID, after.delivered), after.below[0]-1))
	}

	if len(before.staleEpochs) > 0 && len(after.staleEpochs) > 0 {
		add(workflows.DriftStaleEpoch,
			fmt.Sprintf("rows %s were marked published under an older ownership epoch than an earlier version: an owner that had lost the aggregate marked them", versions(after.staleEpochs)),
			"two parties published this aggregate at once: its consumers may have seen those versions out of order or twice (they deduplicate by message id); "+
				"check for a relay paused past its lease or a Ferry older than the lane's fences, and look at the rows: "+
				relaydb.AdviceShowEpochs(k.Type, k.ID))
	}
	if o := after.owner; wf.state == nil && wf.status != "not asked" && before.owner != nil && o != nil &&
		o.Owner == relaydb.OwnerWorkflow && before.owner.Epoch == o.Epoch {
		add(workflows.DriftOwnerWithoutRun,
			fmt.Sprintf("the aggregate is its workflow's (epoch %d, since %s, %s) but the workflow is %s: nothing publishes it",
				o.Epoch, o.Since.UTC().Format(time.RFC3339), o.Cause, wf.status),
			fmt.Sprintf("nothing to do: the reconciler gives it back to the publish-first lane once it has been the workflow's for %s; "+
				"if this comes back, find what ends its workflow (temporal workflow describe -w %s)", in.ReconcileAfter, wf.id))
	}

	// A workflow may publish its last rows and complete between the first
	// read and the question, so rows count as orphaned only when they are
	// still there after the workflow was found gone.
	if wf.state == nil {
		if len(after.dispatched) > 0 {
			add(workflows.DriftWorkflowGone,
				fmt.Sprintf("rows %s are dispatched but the workflow is %s", versions(after.dispatched), wf.status),
				fmt.Sprintf("nothing to do: the reconciler re-dispatches rows dispatched over %s ago whose workflow is gone; "+
					"if this aggregate comes back, find what ends its workflow (temporal workflow describe -w %s)", in.ReconcileAfter, wf.id))
		}
		if len(after.quarantined) > 0 {
			add(workflows.DriftWorkflowGone,
				fmt.Sprintf("row %s is quarantined but the workflow that held it is %s: nothing retries it", versions(after.quarantined), wf.status),
				"set it back to pending and a new run tries it again: "+relaydb.AdviceRequeue(k.Type, k.ID, "quarantined"))
		}
		return out
	}

	st := wf.state
	terminate := fmt.Sprintf("temporal workflow terminate -w %s --reason 'drift'", wf.id)
	// Versions in flight are marked in the table before the workflow hears
	// back, but stay among its pending events until then.
	if before.delivered > st.Delivered && before.delivered != st.Publishing && !slices.Contains(st.Pending, before.delivered) {
		add(workflows.DriftWorkflowBehind,
			fmt.Sprintf("outbox_aggregates.delivered_version is %d, the running workflow has delivered %d and holds %s", before.delivered, st.Delivered, versions(st.Pending)),
			fmt.Sprintf("the workflow would wait for versions the table calls delivered: terminate it (%s); "+
				"the reconciler re-dispatches its rows and the next run resumes from the table", terminate))
	}
	if st.Delivered > after.delivered {
		add(workflows.DriftWorkflowAhead,
			fmt.Sprintf("the running workflow has delivered %d, outbox_aggregates.delivered_version says %d", st.Delivered, after.delivered),
			fmt.Sprintf("delivered_version moved back (a restore, a manual update?). If versions %d to %d are published in outbox_events, "+
				"set it: %s; otherwise the next run publishes them again (consumers deduplicate)",
				after.delivered+1, st.Delivered, relaydb.AdviceSetDelivered(k.Type, k.ID, st.Delivered)))
	}
	var lost []int64
	for _, v := range before.dispatched {
		if v > st.Delivered && v != st.Publishing && !slices.Contains(st.Pending, v) {
			lost = append(lost, v)
		}
	}
	if len(lost) > 0 {
		add(workflows.DriftSignalLost,
			fmt.Sprintf("rows %s are dispatched but the running workflow does not hold them (delivered %d, pending %s)", versions(lost), st.Delivered, versions(st.Pending)),
			fmt.Sprintf("their signals went to a run that ended: the reconciler re-dispatches them once they are %s old "+
				"(only those dispatched before this run started while the run has signals it has not taken, state.unread); "+
				"to do it now, set them back to pending and the poller signals them again (a repeat is dropped as a duplicate): %s",
				in.ReconcileAfter, relaydb.AdviceRequeue(k.Type, k.ID, "dispatched")))
	}
	return out
}

// versions writes ascending versions as "v3-v5, v9", at most 10 runs.
func versions(vs []int64) string {
	if len(vs) == 0 {
		return "none"
	}
	var b strings.Builder
	runs := 0
	for i := 0; i < len(vs); {
		j := i
		for j+1 < len(vs) && vs[j+1] == vs[j]+1 {
			j++
		}
		if runs == 10 {
			b.WriteString(", …")
			break
		}
		if runs > 0 {
			b.WriteString(", ")
		}
		if j > i {
			fmt.Fprintf(&b, "v%d-v%d", vs[i], vs[j])
		} else {
			fmt.Fprintf(&b, "v%d", vs[i])
		}
		runs++
		i = j + 1
	}
	return b.String()
}
