package payment

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-outbox/ferry/effects"
)

// Metrics are what the payment activities count: their answers in
// ferry_effect_outcomes_total{kind="charge"|"refund"} and the lookups that
// reconcile unknown outcomes. A nil *Metrics counts nothing.
type Metrics struct {
	outcomes *prometheus.CounterVec
	lookups  *prometheus.CounterVec
}

// NewMetrics creates the payment counters and registers them on reg, or
// takes the ones already registered there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	outcomes, err := effects.OutcomeCounter(reg)
	if err != nil {
		return nil, err
	}
	lookups, err := effects.RegisterMetric(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_effect_payment_lookups_total",
		Help: "Lookups of payment idempotency keys to reconcile unknown outcomes, by result (found, not_found, in_progress, error).",
	}, []string{"result"}))
	if err != nil {
		return nil, err
	}
	return &Metrics{outcomes: outcomes, lookups: lookups}, nil
}

// outcome counts one answer to a request of op (charge, refund).
func (m *Metrics) outcome(op, outcome string) {
	if m != nil {
		m.outcomes.WithLabelValues(op, outcome).Inc()
	}
}

// lookup counts one reconciliation lookup by result.
func (m *Metrics) lookup(result string) {
	if m != nil {
		m.lookups.WithLabelValues(result).Inc()
	}
}
