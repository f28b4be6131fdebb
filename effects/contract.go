package effects

import (
	"encoding/json"
	"fmt"
	"time"
)

// Registered names. Wire contract: never rename.
const (
	// PaymentWorkflowName charges or refunds (kinds "charge", "refund").
	PaymentWorkflowName = "ferry.effects.Payment"
	// EmailWorkflowName sends one e-mail (kind "email:<template>").
	EmailWorkflowName = "ferry.effects.Email"

	// PreparePaymentActivity reads the event and returns the PaymentRequest.
	PreparePaymentActivity = "ferry.effects.PreparePayment"
	// SendPaymentActivity sends a PaymentRequest with its idempotency key.
	SendPaymentActivity = "ferry.effects.SendPayment"
	// LookupPaymentActivity asks the provider what became of a key.
	LookupPaymentActivity = "ferry.effects.LookupPayment"
	// SendEmailActivity sends an e-mail once per key (sent-ledger).
	SendEmailActivity = "ferry.effects.SendEmail"
	// ResolveEmailActivity records an operator's decision in the ledger.
	ResolveEmailActivity = "ferry.effects.ResolveEmail"

	// StateQuery returns an effect workflow's state (PaymentState,
	// EmailState).
	StateQuery = "ferry.effect.state"
	// ResolveSignal carries an operator's Resolution to an escalated effect.
	ResolveSignal = "ferry.effect.resolve"
	// MemoKey is the memo field an effect workflow keeps its summary in
	// (phase, key, outcome), shown in the Temporal UI.
	MemoKey = "ferry.effect"
)

// Built-in effect kinds.
const (
	KindCharge = "charge"
	KindRefund = "refund"
	KindEmail  = "email"
)

// Error types of effect failures (temporal.ApplicationError types).
const (
	// ErrTypeKeyMismatch: the provider saw the key with other parameters.
	// A bug (the key is not unique to the request, or the event changed):
	// never retried, the workflow fails loudly.
	ErrTypeKeyMismatch = "IdempotencyKeyMismatch"
	// ErrTypeNotSent: nothing reached the provider; retried.
	ErrTypeNotSent = "NotSent"
	// ErrTypeInProgress: the provider is still working on the key (409);
	// a wait, retried.
	ErrTypeInProgress = "InProgress"
	// ErrTypeRateLimited: 429; a wait, retried after Retry-After.
	ErrTypeRateLimited = "RateLimited"
	// ErrTypeInvalidEvent: the event cannot make a request (no amount, no
	// address, unknown template); not retried, recorded as the result.
	ErrTypeInvalidEvent = "InvalidEvent"
	// ErrTypeChargeNotYet: a refund found no charge for its reference yet;
	// retried until the send window closes.
	ErrTypeChargeNotYet = "ChargeNotYet"
	// ErrTypeEmailRejected: the SMTP server refused for good (5xx).
	ErrTypeEmailRejected = "EmailRejected"
	// ErrTypeEmailAmbiguous: the connection dropped after the final "."
	// (RFC 1047); retried (and so re-sent with the same Message-ID) under
	// the resend policy.
	ErrTypeEmailAmbiguous = "EmailAmbiguous"
	// ErrTypeEmailParked: ambiguous under the park policy; the workflow
	// waits for an operator.
	ErrTypeEmailParked = "EmailParked"
)

// Error classes an escalated effect shows in workflows.SAErrorClass.
const (
	ErrClassPaymentUnknown = "PaymentUnknown"
	ErrClassEmailAmbiguous = "EmailAmbiguous"
)

// IdempotencyKey is the key an effect sends for one step of one event:
// "ferry/<effect>/<event id>/<step>". It depends on nothing a retry, a
// continue-as-new, a reset or a replay changes.
func IdempotencyKey(effect, eventID, step string) string {
	return "ferry/" + effect + "/" + eventID + "/" + step
}

// Payment operations.
const (
	OpCharge = "charge"
	OpRefund = "refund"
)

// Payment outcome statuses.
const (
	// StatusSucceeded: the provider charged (or refunded).
	StatusSucceeded = "succeeded"
	// StatusDeclined: the provider refused the card (402); permanent.
	StatusDeclined = "declined"
	// StatusInvalid: the request cannot succeed (400, or the event lacks
	// what it needs); permanent, nothing was charged.
	StatusInvalid = "invalid"
	// StatusUnknown: the request may or may not have been processed
	// (timeout after sending, 5xx, connection reset mid-response).
	StatusUnknown = "unknown"
	// StatusFailed: an operator found that nothing was charged and closed
	// the effect.
	StatusFailed = "failed"
)

// PaymentParams tune the Payment workflow (EffectStart.Params). Zero fields
// take the defaults named.
type PaymentParams struct {
	// ReconcileInitial is the first wait before looking an unknown outcome
	// up; it doubles per lookup. Default 2s.
	ReconcileInitial time.Duration `json:"reconcile_initial,omitempty"`
	// ReconcileMax caps the wait between lookups. Default 5m.
	ReconcileMax time.Duration `json:"reconcile_max,omitempty"`
	// EscalateAfter an outcome has been unknown this long, the workflow
	// blocks for an operator (FerryBlocked in the UI). Default 1h: far
	// inside the provider's key retention.
	EscalateAfter time.Duration `json:"escalate_after,omitempty"`
	// KeyRetention is how long the provider remembers a key; the workflow
	// never re-sends on its own later than half of it after the first
	// send. Default 24h (Stripe's).
	KeyRetention time.Duration `json:"key_retention,omitempty"`
	// SendWindow bounds the retries of a send that never got an answer
	// (provider down, 409, 429); after it the outcome is unknown and
	// reconciliation decides. Default 10m.
	SendWindow time.Duration `json:"send_window,omitempty"`
	// AttemptTimeout bounds one send attempt (keep it above the payment
	// client's timeout); it is also how long an attempt whose worker died
	// waits before the next attempt looks the key up. Default 1m.
	AttemptTimeout time.Duration `json:"attempt_timeout,omitempty"`
}

// Defaults of PaymentParams.
const (
	DefaultReconcileInitial = 2 * time.Second
	DefaultReconcileMax     = 5 * time.Minute
	DefaultEscalateAfter    = time.Hour
	DefaultKeyRetention     = 24 * time.Hour
	DefaultSendWindow       = 10 * time.Minute
	DefaultAttemptTimeout   = time.Minute
)

// WithDefaults fills zero fields and validates.
func (p PaymentParams) WithDefaults() (PaymentParams, error) {
	if p.ReconcileInitial == 0 {
		p.ReconcileInitial = DefaultReconcileInitial
	}
	if p.ReconcileMax == 0 {
		p.ReconcileMax = DefaultReconcileMax
	}
	if p.EscalateAfter == 0 {
		p.EscalateAfter = DefaultEscalateAfter
	}
	if p.KeyRetention == 0 {
		p.KeyRetention = DefaultKeyRetention
	}
	if p.SendWindow == 0 {
		p.SendWindow = DefaultSendWindow
	}
	if p.AttemptTimeout == 0 {
		p.AttemptTimeout = DefaultAttemptTimeout
	}
	switch {
	case p.ReconcileInitial < 0 || p.ReconcileMax < p.ReconcileInitial:
		return p, fmt.Errorf("PaymentParams.ReconcileMax %s must be at least ReconcileInitial %s (both positive)", p.ReconcileMax, p.ReconcileInitial)
	case p.EscalateAfter >= p.KeyRetention/2:
		return p, fmt.Errorf("PaymentParams.EscalateAfter %s must be well inside the key retention %s (less than half)", p.EscalateAfter, p.KeyRetention)
	case p.SendWindow < 0 || p.AttemptTimeout < 0:
		return p, fmt.Errorf("PaymentParams.SendWindow %s and AttemptTimeout %s must be positive", p.SendWindow, p.AttemptTimeout)
	}
	return p, nil
}

// PaymentRequest is what is sent, the same on every attempt (it is the
// recorded result of PreparePaymentActivity).
type PaymentRequest struct {
	Op  string `json:"op"`
	Key string `json:"key"`
	// Amount in the currency's minor unit.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Reference ties the charge to its aggregate ("<type>/<id>"); refunds
	// find their charge by it.
	Reference   string `json:"reference"`
	Description string `json:"description,omitempty"`
	// ChargeID is the charge a refund refunds.
	ChargeID string `json:"charge_id,omitempty"`
}

// PaymentOutcome is what became of a PaymentRequest.
type PaymentOutcome struct {
	Status string `json:"status"`
	// ID of the charge or refund at the provider (also for a declined
	// charge, which the provider records).
	ID       string `json:"id,omitempty"`
	Amount   int64  `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	// Code and Message: the provider's reason for declined or invalid, or
	// what made the outcome unknown.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Replayed: the provider answered with the stored response of an
	// earlier request with the key.
	Replayed bool `json:"replayed,omitempty"`
}

// Lookup results.
const (
	LookupFound      = "found"
	LookupInProgress = "in_progress"
	LookupNotFound   = "not_found"
)

// LookupResult is LookupPaymentActivity's result.
type LookupResult struct {
	// Result: LookupFound (Outcome holds it), LookupInProgress (the
	// provider is still working on the key) or LookupNotFound (the
	// provider never saw the key, or has forgotten it).
	Result  string         `json:"result"`
	Outcome PaymentOutcome `json:"outcome"`
}

// PrepareInput is PreparePaymentActivity's input.
type PrepareInput struct {
	Op    string      `json:"op"`
	Key   string      `json:"key"`
	Event EffectEvent `json:"event"`
}

// EffectEvent identifies the event an effect acts on.
type EffectEvent struct {
	ID            string `json:"id"`
	Type          string `json:"type"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
}

// Resolution is an operator's decision for an escalated effect
// (ResolveSignal).
type Resolution struct {
	// Action: ActionResolveSucceeded / ActionResolveFailed record the
	// operator's finding; ActionResend sends again with the same key;
	// ActionLookup looks the key up now.
	Action string `json:"action"`
	// ID of the charge, refund or e-mail, when the operator knows it.
	ID     string `json:"id,omitempty"`
	Actor  string `json:"actor"`
	Reason string `json:"reason"`
}

// Resolution actions.
const (
	ActionResolveSucceeded = "succeeded"
	ActionResolveFailed    = "failed"
	ActionResend           = "resend"
	ActionLookup           = "lookup"
)

// Validate says why an operator's resolution cannot be applied.
func (r Resolution) Validate() error {
	switch {
	case r.Actor == "":
		return fmt.Errorf("resolution: actor is empty: say who decides")
	case r.Reason == "":
		return fmt.Errorf("resolution: reason is empty: say why, for the record")
	case r.Action != ActionResolveSucceeded && r.Action != ActionResolveFailed && r.Action != ActionResend && r.Action != ActionLookup:
		return fmt.Errorf("resolution: action %q: use succeeded, failed, resend or lookup", r.Action)
	}
	return nil
}

// Payment workflow phases (PaymentState.Phase).
const (
	PhasePreparing   = "preparing"
	PhaseSending     = "sending"
	PhaseReconciling = "reconciling"
	PhaseEscalated   = "escalated"
	PhaseDone        = "done"
)

// PaymentState is what StateQuery returns for a Payment workflow, and (in
// short) its memo.
type PaymentState struct {
	Effect  string          `json:"effect"`
	EventID string          `json:"event_id"`
	Key     string          `json:"key"`
	Phase   string          `json:"phase"`
	Request *PaymentRequest `json:"request,omitempty"`
	Outcome *PaymentOutcome `json:"outcome,omitempty"`
	// FirstSentAt: the first send; the key's retention counts from it.
	FirstSentAt time.Time `json:"first_sent_at,omitzero"`
	// UnknownSince: when the outcome became unknown (zero: never).
	UnknownSince time.Time `json:"unknown_since,omitzero"`
	EscalateAt   time.Time `json:"escalate_at,omitzero"`
	NextLookupAt time.Time `json:"next_lookup_at,omitzero"`
	Lookups      int       `json:"lookups"`
	// Sends counts requests sent with the key (re-sends after a lookup
	// that found nothing included); the provider charges at most once.
	Sends      int         `json:"sends"`
	Reconciled bool        `json:"reconciled,omitempty"`
	Escalated  bool        `json:"escalated,omitempty"`
	Resolution *Resolution `json:"resolution,omitempty"`
	Rejected   []string    `json:"rejected,omitempty"`
}

// PaymentResult is the Payment workflow's result.
type PaymentResult struct {
	Key     string         `json:"key"`
	Outcome PaymentOutcome `json:"outcome"`
	// Reconciled: the outcome was unknown once and was settled by a
	// lookup (or an operator).
	Reconciled bool `json:"reconciled,omitempty"`
	Lookups    int  `json:"lookups,omitempty"`
	Sends      int  `json:"sends"`
	// ResolvedBy is the operator who settled it, if one did.
	ResolvedBy string `json:"resolved_by,omitempty"`
}

// EmailRequest is SendEmailActivity's input.
type EmailRequest struct {
	Key      string      `json:"key"`
	Effect   string      `json:"effect"`
	Template string      `json:"template"`
	Event    EffectEvent `json:"event"`
	// Resend: an operator asked to send again although the ledger says
	// the last attempt was ambiguous (park policy).
	Resend bool `json:"resend,omitempty"`
}

// Email result statuses.
const (
	EmailSent        = "sent"
	EmailAlreadySent = "already_sent"
	EmailRejected    = "rejected"
	EmailInvalid     = "invalid"
	// EmailMarkedSent / EmailMarkedFailed: an operator settled an
	// ambiguous send.
	EmailMarkedSent   = "marked_sent"
	EmailMarkedFailed = "marked_failed"
)

// EmailResult is SendEmailActivity's and the Email workflow's result.
type EmailResult struct {
	Status    string `json:"status"`
	Key       string `json:"key"`
	MessageID string `json:"message_id"`
	// Attempts: SMTP transactions started for the key (ledger).
	Attempts int `json:"attempts,omitempty"`
	// Ambiguous: transactions whose outcome was unknown (a drop after the
	// final "."), each a possible duplicate at the recipient.
	Ambiguous int    `json:"ambiguous,omitempty"`
	Reply     string `json:"reply,omitempty"`
}

// EmailResolveInput is ResolveEmailActivity's input.
type EmailResolveInput struct {
	Key    string `json:"key"`
	Status string `json:"status"` // EmailMarkedSent or EmailMarkedFailed
	Actor  string `json:"actor"`
	Reason string `json:"reason"`
}

// EmailState is what StateQuery returns for an Email workflow.
type EmailState struct {
	Effect     string       `json:"effect"`
	EventID    string       `json:"event_id"`
	Key        string       `json:"key"`
	Phase      string       `json:"phase"`
	Result     *EmailResult `json:"result,omitempty"`
	Escalated  bool         `json:"escalated,omitempty"`
	LastError  string       `json:"last_error,omitempty"`
	Resolution *Resolution  `json:"resolution,omitempty"`
	Rejected   []string     `json:"rejected,omitempty"`
}

func decodeParams[T any](raw json.RawMessage) (T, error) {
	var v T
	if len(raw) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("effect params: %w", err)
	}
	return v, nil
}
