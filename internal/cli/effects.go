package cli

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/spf13/pflag"

	"github.com/ferry-outbox/ferry/internal/app"
	"github.com/ferry-outbox/ferry/internal/sandbox/payprovider"
	"github.com/ferry-outbox/ferry/internal/sandbox/smtpsink"
)

// addEffectFlags adds the effect routes and the payment and e-mail
// settings (README, Side effects).
func addEffectFlags(f *pflag.FlagSet, g *globals) {
	e := &g.cfg.Effects
	f.StringArrayVar(&e.Routes, "effect", envList("FERRY_EFFECTS"),
		"effects of an event type, TYPE=EFFECT[,EFFECT…], e.g. order.created=charge,email:confirmation (repeatable; FERRY_EFFECTS, ';'-separated)")
	f.StringVar(&e.PaymentsURL, "payments-url", env("FERRY_PAYMENTS_URL", ""), "payment provider API for charge and refund effects (FERRY_PAYMENTS_URL)")
	f.StringVar(&e.PaymentsAPIKey, "payments-api-key", env("FERRY_PAYMENTS_API_KEY", ""),
		"payment provider API key, sent as a bearer token; prefer the environment or the config file (FERRY_PAYMENTS_API_KEY)")
	f.DurationVar(&e.PaymentsTimeout, "payments-timeout", envDuration("FERRY_PAYMENTS_TIMEOUT", 10*time.Second), "timeout of one request to the payment provider (FERRY_PAYMENTS_TIMEOUT)")
	f.StringVar(&e.PaymentAmountField, "payment-amount-field", env("FERRY_PAYMENT_AMOUNT_FIELD", "amount"), "payload field with the amount in minor units (FERRY_PAYMENT_AMOUNT_FIELD)")
	f.DurationVar(&e.PaymentEscalateAfter, "payment-escalate-after", envDuration("FERRY_PAYMENT_ESCALATE_AFTER", time.Hour),
		"a payment whose outcome stays unknown this long blocks for an operator (FERRY_PAYMENT_ESCALATE_AFTER)")
	f.DurationVar(&e.PaymentAttemptTimeout, "payment-attempt-timeout", envDuration("FERRY_PAYMENT_ATTEMPT_TIMEOUT", time.Minute),
		"bound of one payment send attempt; after a worker died the next attempt starts after it (FERRY_PAYMENT_ATTEMPT_TIMEOUT)")
	f.StringVar(&e.SMTPAddress, "smtp-address", env("FERRY_SMTP_ADDRESS", ""), "SMTP server host:port for e-mail effects (FERRY_SMTP_ADDRESS)")
	f.StringVar(&e.SMTPFrom, "smtp-from", env("FERRY_SMTP_FROM", "ferry@localhost"), "sender address of e-mail effects (FERRY_SMTP_FROM)")
	f.StringVar(&e.EmailAmbiguous, "email-ambiguous", env("FERRY_EMAIL_AMBIGUOUS", "resend"),
		"after a drop following the final '.': resend (same Message-ID) or park for an operator (FERRY_EMAIL_AMBIGUOUS)")
	if fl := f.Lookup("payments-api-key"); fl != nil && fl.DefValue != "" {
		fl.DefValue = "xxxxx"
	}
}

// devRoutes are `ferry dev`'s effects when none are configured.
var devRoutes = []string{"order.created=charge,email:confirmation", "order.cancelled=refund"}

// startSandboxes runs the sandbox payment provider and SMTP sink for
// `ferry dev`, with a few faults (faultRate of first requests) so
// reconciliation shows, and points cfg's effects at them.
func startSandboxes(ctx context.Context, cfg *app.Config, faultRate float64, out io.Writer) (stop func(), err error) {
	faults := []payprovider.Fault{payprovider.FaultSlowAfterCommit, payprovider.FaultErrorAfterCommit, payprovider.FaultDropAfterCommit, payprovider.FaultRateLimit}
	pay, err := payprovider.New(payprovider.Config{
		SlowDelay: cfg.Effects.PaymentsTimeout + 2*time.Second,
		Faults: func(r payprovider.Request) payprovider.Fault {
			if r.Method == "POST" && r.Seen == 0 && rand.Float64() < faultRate {
				return faults[rand.IntN(len(faults))]
			}
			return payprovider.FaultNone
		},
	})
	if err != nil {
		return nil, err
	}
	if err := pay.Start(ctx); err != nil {
		return nil, err
	}
	sink, err := smtpsink.New(smtpsink.Config{Faults: func(a smtpsink.Attempt) smtpsink.Fault {
		if a.Seen == 0 && rand.Float64() < faultRate {
			return smtpsink.FaultDropAfterData
		}
		return smtpsink.FaultNone
	}})
	if err != nil {
		pay.Stop()
		return nil, err
	}
	if err := sink.Start(ctx); err != nil {
		pay.Stop()
		return nil, err
	}
	if len(cfg.Effects.Routes) == 0 {
		cfg.Effects.Routes = devRoutes
	}
	if cfg.Effects.PaymentsURL == "" {
		cfg.Effects.PaymentsURL = pay.URL()
	}
	if cfg.Effects.SMTPAddress == "" {
		cfg.Effects.SMTPAddress = sink.Addr()
	}
	fmt.Fprintf(out, "ferry dev: sandbox payment provider on %s (ledger: %s/v1/ledger), SMTP sink on %s; %.0f%% of first requests meet a fault\n",
		pay.URL(), pay.URL(), sink.Addr(), faultRate*100)
	return func() { sink.Stop(); pay.Stop() }, nil
}
