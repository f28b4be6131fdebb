package effects

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// OutcomeCounter returns ferry_effect_outcomes_total{kind,outcome}, the
// answers to effect requests that every built-in effect counts, registered
// on reg (or the one already there: the e-mail and payment activities
// both count in it).
func OutcomeCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	return RegisterMetric(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_effect_outcomes_total",
		Help: "Answers to effect requests and settlements of unknown outcomes, by effect kind (charge, refund, email) and outcome: " +
			"succeeded or sent; failed as declined, invalid, key_mismatch or rejected; unknown or ambiguous; " +
			"reconciled (an unknown outcome settled by a payment lookup or an operator's e-mail resolution); " +
			"not_sent, in_progress, rate_limited and unauthorized are retried attempts.",
	}, []string{"kind", "outcome"}))
}

// RegisterMetric registers c on reg and returns it, or returns the
// identical collector already registered there: effect activities are
// built once per worker, and several workers of one process share its
// registry, so their counters count together.
func RegisterMetric[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		var zero C
		return zero, fmt.Errorf("register metric: %w", err)
	}
	return c, nil
}

// OutcomeReconciled is the outcome of ferry_effect_outcomes_total that
// counts an unknown outcome settled later.
const OutcomeReconciled = "reconciled"
