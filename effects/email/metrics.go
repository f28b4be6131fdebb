package email

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-outbox/ferry/effects"
)

// Metrics are what the e-mail activities count: their answers in
// ferry_effect_outcomes_total{kind="email"} and the ambiguous SMTP
// transactions with what became of them. A nil *Metrics counts nothing.
type Metrics struct {
	outcomes  *prometheus.CounterVec
	ambiguous prometheus.Counter
	resent    prometheus.Counter
	notResent prometheus.Counter
}

// NewMetrics creates the e-mail counters and registers them on reg, or
// takes the ones already registered there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	outcomes, err := effects.OutcomeCounter(reg)
	if err != nil {
		return nil, err
	}
	m := &Metrics{outcomes: outcomes}
	for dst, opts := range map[*prometheus.Counter]prometheus.CounterOpts{
		&m.ambiguous: {
			Name: "ferry_effect_email_ambiguous_total",
			Help: "SMTP transactions whose outcome was unknown (connection lost after the final '.', or a worker died mid-send): each a possible duplicate.",
		},
		&m.resent: {
			Name: "ferry_effect_email_resent_total",
			Help: "E-mails sent again, with the same Message-ID, after an ambiguous transaction.",
		},
		&m.notResent: {
			Name: "ferry_effect_email_not_resent_total",
			Help: "Send attempts that found the e-mail already sent in the ledger and sent nothing.",
		},
	} {
		if *dst, err = effects.RegisterMetric(reg, prometheus.NewCounter(opts)); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// outcome counts one answer to a send.
func (m *Metrics) outcome(outcome string) {
	if m != nil {
		m.outcomes.WithLabelValues(effects.KindEmail, outcome).Inc()
	}
}

// ambiguousSend counts one SMTP transaction with an unknown outcome.
func (m *Metrics) ambiguousSend() {
	if m != nil {
		m.ambiguous.Inc()
	}
}

// resend counts one e-mail sent again after an ambiguous transaction.
func (m *Metrics) resend() {
	if m != nil {
		m.resent.Inc()
	}
}

// ledgerStopped counts one attempt that the sent-ledger stopped.
func (m *Metrics) ledgerStopped() {
	if m != nil {
		m.notResent.Inc()
	}
}
