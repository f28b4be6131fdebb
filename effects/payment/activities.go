package payment

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/relaydb"
)

// ActivitiesConfig configures Activities.
type ActivitiesConfig struct {
	// Client reaches the payment provider. Required.
	Client *Client
	// Pool reads event payloads from outbox_events. Required.
	Pool *pgxpool.Pool
	// Metrics counts outcomes and lookups; nil counts nothing.
	Metrics *Metrics
	// AmountField of the event payload (a top-level JSON integer in the
	// currency's minor unit). Default "amount".
	AmountField string
	// CurrencyField of the event payload. Default "currency".
	CurrencyField string
	// DefaultCurrency when the payload has no CurrencyField. Default "eur".
	DefaultCurrency string
}

// Activities are the Payment workflow's activities.
type Activities struct {
	cfg ActivitiesConfig
}

// DefaultAmountField is ActivitiesConfig.AmountField's default.
const DefaultAmountField = "amount"

// NewActivities validates cfg.
func NewActivities(cfg ActivitiesConfig) (*Activities, error) {
	cfg.AmountField = cmp.Or(cfg.AmountField, DefaultAmountField)
	cfg.CurrencyField = cmp.Or(cfg.CurrencyField, "currency")
	cfg.DefaultCurrency = cmp.Or(cfg.DefaultCurrency, "eur")
	switch {
	case cfg.Client == nil:
		return nil, errors.New("payment: ActivitiesConfig.Client is nil")
	case cfg.Pool == nil:
		return nil, errors.New("payment: ActivitiesConfig.Pool is nil")
	}
	return &Activities{cfg: cfg}, nil
}

// Register registers the activities under their wire names.
func (a *Activities) Register(r worker.Registry) {
	r.RegisterActivityWithOptions(a.PreparePayment, activity.RegisterOptions{Name: effects.PreparePaymentActivity})
	r.RegisterActivityWithOptions(a.SendPayment, activity.RegisterOptions{Name: effects.SendPaymentActivity})
	r.RegisterActivityWithOptions(a.LookupPayment, activity.RegisterOptions{Name: effects.LookupPaymentActivity})
}

// PreparePayment reads the event and builds the request every attempt will
// send. A charge takes its amount (and currency) from the payload; a refund
// finds the aggregate's charge at the provider by reference. An event that
// cannot make a request is ErrTypeInvalidEvent (not retried).
func (a *Activities) PreparePayment(ctx context.Context, in effects.PrepareInput) (effects.PaymentRequest, error) {
	raw, err := relaydb.Payload(ctx, a.cfg.Pool, in.Event.ID)
	switch {
	case errors.Is(err, relaydb.ErrEventNotFound):
		return effects.PaymentRequest{}, invalid("event %s is not in outbox_events", in.Event.ID)
	case err != nil:
		return effects.PaymentRequest{}, err
	}
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(raw, &payload); err != nil {
		return effects.PaymentRequest{}, invalid("event %s: payload is not a JSON object", in.Event.ID)
	}
	req := effects.PaymentRequest{
		Op:          in.Op,
		Key:         in.Key,
		Reference:   in.Event.AggregateType + "/" + in.Event.AggregateID,
		Description: in.Event.AggregateType + " " + in.Event.AggregateID + " " + in.Event.Type,
		Currency:    a.cfg.DefaultCurrency,
	}
	if v, ok := payload[a.cfg.CurrencyField]; ok {
		if err := json.Unmarshal(v, &req.Currency); err != nil {
			return req, invalid("event %s: %q is not a string", in.Event.ID, a.cfg.CurrencyField)
		}
		req.Currency = strings.ToLower(req.Currency)
	}
	amount, hasAmount := payload[a.cfg.AmountField]
	if hasAmount {
		if err := json.Unmarshal(amount, &req.Amount); err != nil {
			return req, invalid("event %s: %q is not an integer amount in minor units", in.Event.ID, a.cfg.AmountField)
		}
	}
	if in.Op != effects.OpRefund {
		if req.Amount <= 0 {
			return req, invalid("event %s: payload needs a positive integer %q to charge", in.Event.ID, a.cfg.AmountField)
		}
		return req, nil
	}
	charges, err := a.cfg.Client.ChargesByReference(ctx, req.Reference)
	if err != nil {
		return req, retryable(err)
	}
	if len(charges) == 0 {
		// The charge may still be on its way (order.created and
		// order.cancelled in quick succession): wait for it, within the
		// workflow's send window.
		return req, temporal.NewApplicationError(fmt.Sprintf("no charge for %s yet: waiting for it", req.Reference), effects.ErrTypeChargeNotYet)
	}
	for _, c := range charges {
		if c.Status == "succeeded" && c.AmountRefunded < c.Amount {
			req.ChargeID, req.Currency = c.ID, c.Currency
			if !hasAmount {
				req.Amount = c.Amount - c.AmountRefunded
			}
			return req, nil
		}
	}
	return req, invalid("no charge left to refund for %s", req.Reference)
}

// SendPayment sends the request with its key. Every attempt after the
// first looks the key up before it sends, so an attempt that died after
// the provider committed (its worker killed) is answered from the provider's
// record. Known outcomes are results; unknown ones too (the workflow
// reconciles); what is safe to retry is a retryable error.
func (a *Activities) SendPayment(ctx context.Context, req effects.PaymentRequest) (effects.PaymentOutcome, error) {
	if activity.GetInfo(ctx).Attempt > 1 {
		res, err := a.lookup(ctx, req)
		switch {
		case err != nil:
			return effects.PaymentOutcome{}, err
		case res.Result == effects.LookupFound:
			a.cfg.Metrics.outcome(req.Op, res.Outcome.Status)
			return res.Outcome, nil
		case res.Result == effects.LookupInProgress:
			return effects.PaymentOutcome{}, temporal.NewApplicationErrorWithOptions("a request with the key is in flight",
				effects.ErrTypeInProgress, temporal.ApplicationErrorOptions{NextRetryDelay: 2 * time.Second})
		}
	}
	var out effects.PaymentOutcome
	var err error
	if req.Op == effects.OpRefund {
		var rf Refund
		var replayed Replayed
		rf, replayed, err = a.cfg.Client.CreateRefund(ctx, req.Key, RefundParams{Charge: req.ChargeID, Amount: req.Amount})
		out = effects.PaymentOutcome{Status: effects.StatusSucceeded, ID: rf.ID, Amount: rf.Amount, Currency: rf.Currency, Replayed: bool(replayed)}
	} else {
		var ch Charge
		var replayed Replayed
		ch, replayed, err = a.cfg.Client.CreateCharge(ctx, req.Key, ChargeParams{
			Amount: req.Amount, Currency: req.Currency, Reference: req.Reference, Description: req.Description,
		})
		out = effects.PaymentOutcome{Status: effects.StatusSucceeded, ID: ch.ID, Amount: ch.Amount, Currency: ch.Currency, Replayed: bool(replayed)}
	}
	if err == nil {
		a.cfg.Metrics.outcome(req.Op, effects.StatusSucceeded)
		return out, nil
	}
	var pe *Error
	if !errors.As(err, &pe) {
		return effects.PaymentOutcome{}, err
	}
	a.cfg.Metrics.outcome(req.Op, pe.Class.String())
	switch pe.Class {
	case ClassDeclined:
		return effects.PaymentOutcome{Status: effects.StatusDeclined, ID: pe.Charge, Code: pe.Code, Message: pe.Message}, nil
	case ClassInvalid:
		return effects.PaymentOutcome{Status: effects.StatusInvalid, Code: pe.Code, Message: pe.Message}, nil
	case ClassUnknown:
		activity.GetLogger(ctx).Warn("payment outcome unknown", "key", req.Key, "error", err)
		return effects.PaymentOutcome{Status: effects.StatusUnknown, Message: err.Error()}, nil
	case ClassKeyMismatch:
		return effects.PaymentOutcome{}, temporal.NewNonRetryableApplicationError(err.Error(), effects.ErrTypeKeyMismatch, err)
	default:
		return effects.PaymentOutcome{}, retryable(err)
	}
}

// LookupPayment asks the provider what became of the request's key. The
// workflow runs it only to reconcile an unknown outcome, so a key found
// settles that outcome and counts as reconciled (the workflow stops looking
// once it has the answer).
func (a *Activities) LookupPayment(ctx context.Context, req effects.PaymentRequest) (effects.LookupResult, error) {
	res, err := a.lookup(ctx, req)
	if err == nil && res.Result == effects.LookupFound {
		a.cfg.Metrics.outcome(req.Op, effects.OutcomeReconciled)
	}
	return res, err
}

// lookup is LookupPayment without the reconciled count: SendPayment's
// retries look the key up too, with no unknown outcome recorded before.
func (a *Activities) lookup(ctx context.Context, req effects.PaymentRequest) (effects.LookupResult, error) {
	var res effects.LookupResult
	var found bool
	var err error
	if req.Op == effects.OpRefund {
		var rf Refund
		rf, found, err = a.cfg.Client.RefundByKey(ctx, req.Key)
		res.Outcome = effects.PaymentOutcome{Status: effects.StatusSucceeded, ID: rf.ID, Amount: rf.Amount, Currency: rf.Currency}
	} else {
		var ch Charge
		ch, found, err = a.cfg.Client.ChargeByKey(ctx, req.Key)
		res.Outcome = effects.PaymentOutcome{Status: effects.StatusSucceeded, ID: ch.ID, Amount: ch.Amount, Currency: ch.Currency}
		if ch.Status == "failed" {
			res.Outcome.Status, res.Outcome.Code = effects.StatusDeclined, ch.FailureCode
		}
	}
	switch {
	case ClassOf(err) == ClassInProgress:
		res = effects.LookupResult{Result: effects.LookupInProgress}
	case err != nil:
		a.cfg.Metrics.lookup("error")
		return res, retryable(err)
	case found:
		res.Result = effects.LookupFound
	default:
		res = effects.LookupResult{Result: effects.LookupNotFound}
	}
	a.cfg.Metrics.lookup(res.Result)
	return res, nil
}

func invalid(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return temporal.NewNonRetryableApplicationError(msg, effects.ErrTypeInvalidEvent, nil)
}

// retryable wraps a provider error as a retryable activity error of its
// class, waiting Retry-After on a 429.
func retryable(err error) error {
	var pe *Error
	if !errors.As(err, &pe) {
		return err
	}
	opts := temporal.ApplicationErrorOptions{Cause: err}
	typ := effects.ErrTypeNotSent
	switch pe.Class {
	case ClassRateLimited:
		typ = effects.ErrTypeRateLimited
		opts.NextRetryDelay = max(pe.RetryAfter, time.Second)
	case ClassInProgress:
		typ = effects.ErrTypeInProgress
		opts.NextRetryDelay = 2 * time.Second
	case ClassUnknown:
		typ = "Unknown"
	case ClassUnauthorized:
		typ = "Unauthorized"
	}
	return temporal.NewApplicationErrorWithOptions(err.Error(), typ, opts)
}
