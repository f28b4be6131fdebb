package cli

import (
	"time"

	"github.com/spf13/pflag"
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
