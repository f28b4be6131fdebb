package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Maintenance are the counters of the retention and reconcile runs and of
// the drift check. A nil *Maintenance counts nothing.
type Maintenance struct {
	retention  *prometheus.CounterVec
	reconciled *prometheus.CounterVec

	driftSampled   prometheus.Counter
	driftUnchecked prometheus.Counter
	driftFound     *prometheus.CounterVec

	// relay counts the aggregates the reconciler takes back
	// (ferry_lane_handoffs_total), when linked (CountHandoffsIn).
	relay *Relay
}

// CountHandoffsIn makes the reconciler count the aggregates it takes back
// from workflows in r's ferry_lane_handoffs_total{direction="to_lane",
// cause="reconciled"}.
func (m *Maintenance) CountHandoffsIn(r *Relay) {
	if m != nil {
		m.relay = r
	}
}

// TakenBack counts one aggregate the reconciler took back from a
// workflow whose run ended without releasing it, and the rows it set
// pending again (ReconcileOwnerGone).
func (m *Maintenance) TakenBack(rows int64) {
	if m == nil {
		return
	}
	m.relay.Handoff(ToLane, CauseReconciled)
	m.reconciled.WithLabelValues(ReconcileOwnerGone).Add(float64(rows))
}

// NewMaintenance creates the maintenance counters and registers them on reg.
func NewMaintenance(reg prometheus.Registerer) (*Maintenance, error) {
	m := &Maintenance{
		retention: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_retention_rows_total",
			Help: "Rows handled by retention, by step: delete (delivered rows deleted), purge_payloads (payloads of delivered rows blanked).",
		}, []string{"step"}),
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_reconciled_rows_total",
			Help: "Dispatched rows the reconciler set back to pending, by cause: workflow_not_running (no open run), not_held_by_run (the open run started after the row was dispatched and does not hold it), owner_run_ended (the publish-first lane took the aggregate back from a workflow with no open run).",
		}, []string{"cause"}),
		driftSampled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_drift_sampled_total",
			Help: "Aggregates whose outbox rows the drift check compared with their workflow's state.",
		}),
		driftUnchecked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_drift_unchecked_total",
			Help: "Sampled aggregates whose workflow did not answer the drift check (no worker, timeout).",
		}),
		driftFound: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_drift_found_total",
			Help: "Aggregates whose rows and workflow disagreed twice in a drift check, by kind (workflow_gone, workflow_behind, workflow_ahead, signal_lost, below_cursor).",
		}, []string{"kind"}),
	}
	if err := register(reg, m.retention, m.reconciled, m.driftSampled, m.driftUnchecked, m.driftFound); err != nil {
		return nil, err
	}
	// Every known label value starts at 0: a counter series born at its
	// first increment has no earlier sample, so rate() and increase() miss
	// that increment (and a rule over them stays silent on it).
	for _, step := range []string{StepDelete, StepPurgePayloads} {
		m.retention.WithLabelValues(step)
	}
	for _, cause := range []string{ReconcileNotRunning, ReconcileNotHeld} {
		m.reconciled.WithLabelValues(cause)
	}
	return m, nil
}

// KnownDriftKinds starts ferry_drift_found_total at 0 for each kind (the
// kinds are the drift check's, workflows.Drift*), so that the first drift
// of a kind counts in increase() and FerryDriftFound fires on it.
func (m *Maintenance) KnownDriftKinds(kinds ...string) {
	if m != nil {
		for _, k := range kinds {
			m.driftFound.WithLabelValues(k)
		}
	}
}

// Steps of retention, the values of ferry_retention_rows_total's step label.
const (
	StepDelete        = "delete"
	StepPurgePayloads = "purge_payloads"
)

// Retained counts rows handled by one retention step (StepDelete,
// StepPurgePayloads).
func (m *Maintenance) Retained(step string, n int64) {
	if m != nil {
		m.retention.WithLabelValues(step).Add(float64(n))
	}
}

// Causes of a re-dispatch, the values of ferry_reconciled_rows_total's
// cause label.
const (
	// ReconcileNotRunning: the aggregate's workflow had no open run.
	ReconcileNotRunning = "workflow_not_running"
	// ReconcileNotHeld: the open run started after the rows were
	// dispatched (to a run that ended) and does not hold them.
	ReconcileNotHeld = "not_held_by_run"
	// ReconcileOwnerGone: the workflow that owned the aggregate in the
	// publish-first lane has no open run; the aggregate went back to the
	// lane with the rows dispatched to it.
	ReconcileOwnerGone = "owner_run_ended"
)

// Reconciled counts rows re-dispatched for cause (ReconcileNotRunning,
// ReconcileNotHeld).
func (m *Maintenance) Reconciled(cause string, n int64) {
	if m != nil {
		m.reconciled.WithLabelValues(cause).Add(float64(n))
	}
}

// DriftChecked counts one drift check's sampled and unchecked aggregates.
func (m *Maintenance) DriftChecked(sampled, unchecked int) {
	if m != nil {
		m.driftSampled.Add(float64(sampled))
		m.driftUnchecked.Add(float64(unchecked))
	}
}

// DriftFound counts one drifted aggregate.
func (m *Maintenance) DriftFound(kind string) {
	if m != nil {
		m.driftFound.WithLabelValues(kind).Inc()
	}
}
