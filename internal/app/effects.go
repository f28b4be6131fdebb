package app

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/effects/email"
	"github.com/ferry-outbox/ferry/effects/payment"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

// EffectsConfig routes event types to effect workflows and configures the
// built-in payment and e-mail effects (README, Side effects). The zero
// value routes nothing.
type EffectsConfig struct {
	// Routes, each "<aggregate_type>.<event_type>=<effect>[,<effect>…]",
	// e.g. "order.created=charge,email:confirmation". Default: none.
	Routes []string
	// PaymentsURL is the payment provider's API. Required when a route
	// charges or refunds.
	PaymentsURL string
	// PaymentsAPIKey is sent as a bearer token. A secret: never printed.
	// Default: none.
	PaymentsAPIKey string
	// PaymentsTimeout of one request to the provider. Default 10s.
	PaymentsTimeout time.Duration
	// PaymentAmountField of the event payload (integer, minor units).
	// Default "amount".
	PaymentAmountField string
	// PaymentEscalateAfter: an outcome unknown this long blocks for an
	// operator. Default 1h (far inside the provider's 24h key retention).
	PaymentEscalateAfter time.Duration
	// PaymentAttemptTimeout bounds one send attempt, and is how long an
	// attempt whose worker died waits before the next looks the key up.
	// Default 1m.
	PaymentAttemptTimeout time.Duration
	// SMTPAddress host:port. Required when a route sends e-mail.
	SMTPAddress string
	// SMTPFrom is the sender address. Default "ferry@localhost".
	SMTPFrom string
	// EmailAmbiguous is "resend" (default: same Message-ID) or "park" (an
	// operator decides) for a drop after the final ".".
	EmailAmbiguous string
}

// String never shows the API key.
func (e EffectsConfig) String() string {
	type plain EffectsConfig
	if e.PaymentsAPIKey != "" {
		e.PaymentsAPIKey = hidden
	}
	return fmt.Sprintf("%+v", plain(e))
}

func (e EffectsConfig) withDefaults() (EffectsConfig, error) {
	e.PaymentsTimeout = cmp.Or(e.PaymentsTimeout, 10*time.Second)
	e.SMTPFrom = cmp.Or(e.SMTPFrom, "ferry@localhost")
	e.EmailAmbiguous = cmp.Or(e.EmailAmbiguous, email.PolicyResend)
	router, err := e.router()
	if err != nil {
		return e, err
	}
	kinds := router.Kinds()
	if (slices.Contains(kinds, effects.KindCharge) || slices.Contains(kinds, effects.KindRefund)) && e.PaymentsURL == "" {
		return e, errors.New("effects: a route charges or refunds, but no payment provider is set (--payments-url or FERRY_PAYMENTS_URL)")
	}
	if slices.Contains(kinds, effects.KindEmail) && e.SMTPAddress == "" {
		return e, errors.New("effects: a route sends e-mail, but no SMTP server is set (--smtp-address or FERRY_SMTP_ADDRESS)")
	}
	if e.PaymentsTimeout >= cmp.Or(e.PaymentAttemptTimeout, effects.DefaultAttemptTimeout) {
		return e, fmt.Errorf("effects: payments timeout %s must be shorter than the payment attempt timeout %s", e.PaymentsTimeout, cmp.Or(e.PaymentAttemptTimeout, effects.DefaultAttemptTimeout))
	}
	if e.EmailAmbiguous != email.PolicyResend && e.EmailAmbiguous != email.PolicyPark {
		return e, fmt.Errorf("effects: e-mail ambiguous policy %q: use resend or park", e.EmailAmbiguous)
	}
	return e, nil
}

func (e EffectsConfig) router() (*effects.Router, error) {
	routes, err := effects.ParseRoutes(e.Routes)
	if err != nil {
		return nil, err
	}
	return effects.NewRouter(effects.RouterConfig{Routes: routes, Payment: effects.PaymentParams{
		EscalateAfter: e.PaymentEscalateAfter, AttemptTimeout: e.PaymentAttemptTimeout,
	}})
}

// WorkerEffects builds what the worker needs for the configured effects:
// the routes (activities.Config.Effects) and the registrars of the effect
// workflows and activities (worker.Config.Effects). Without routes both
// are nil.
func WorkerEffects(cfg EffectsConfig, pool *pgxpool.Pool, m *metrics.Metrics) (func(string, string) []workflows.EffectStart, []worker.Registrar, error) {
	if len(cfg.Routes) == 0 {
		return nil, nil, nil
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	router, err := cfg.router()
	if err != nil {
		return nil, nil, err
	}
	regs := []worker.Registrar{effects.Workflows{}}
	if cfg.PaymentsURL != "" {
		c, err := payment.New(payment.Config{BaseURL: cfg.PaymentsURL, APIKey: cfg.PaymentsAPIKey, Timeout: cfg.PaymentsTimeout})
		if err != nil {
			return nil, nil, err
		}
		var pm *payment.Metrics
		if reg := m.Registerer(); reg != nil {
			if pm, err = payment.NewMetrics(reg); err != nil {
				return nil, nil, err
			}
		}
		acts, err := payment.NewActivities(payment.ActivitiesConfig{Client: c, Pool: pool, Metrics: pm, AmountField: cfg.PaymentAmountField})
		if err != nil {
			return nil, nil, err
		}
		regs = append(regs, acts)
	}
	if cfg.SMTPAddress != "" {
		var em *email.Metrics
		if reg := m.Registerer(); reg != nil {
			if em, err = email.NewMetrics(reg); err != nil {
				return nil, nil, err
			}
		}
		acts, err := email.NewActivities(email.Config{Pool: pool, SMTPAddress: cfg.SMTPAddress, From: cfg.SMTPFrom, Ambiguous: cfg.EmailAmbiguous, Metrics: em})
		if err != nil {
			return nil, nil, err
		}
		regs = append(regs, acts)
	}
	return router.For, regs, nil
}
