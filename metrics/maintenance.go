package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Maintenance are the counters of the retention and reconcile runs. A nil
// *Maintenance counts nothing.
type Maintenance struct {
	retention  *prometheus.CounterVec
	reconciled prometheus.Counter
}

// NewMaintenance creates the maintenance counters and registers them on reg.
func NewMaintenance(reg prometheus.Registerer) (*Maintenance, error) {
	m := &Maintenance{
		retention: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_retention_rows_total",
			Help: "Rows handled by retention, by step (delete delivered rows, purge payloads).",
		}, []string{"step"}),
		reconciled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_reconciled_rows_total",
			Help: "Dispatched rows set back to pending because their aggregate workflow was not running.",
		}),
	}
	for _, c := range []prometheus.Collector{m.retention, m.reconciled} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metric: %w", err)
		}
	}
	return m, nil
}

// Retained counts rows handled by one retention step.
func (m *Maintenance) Retained(step string, n int64) {
	if m != nil {
		m.retention.WithLabelValues(step).Add(float64(n))
	}
}

// Reconciled counts re-dispatched rows.
func (m *Maintenance) Reconciled(n int64) {
	if m != nil {
		m.reconciled.Add(float64(n))
	}
}
