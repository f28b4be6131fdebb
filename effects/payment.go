package effects

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/workflows"
)

// prepareOptions: reading the event must eventually work; an event that
// cannot make a request fails non-retryably (ErrTypeInvalidEvent).
var prepareOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    30 * time.Second,
	},
}

// sendOptions retry what is safe to retry with the same key: nothing sent,
// 409 and 429 are waits, and an attempt that died (its worker killed) is
// retried too, because every attempt after the first looks the key up
// before it sends. Only a key mismatch stops at once; when the send window
// closes without an answer the outcome is unknown and reconciliation takes
// over.
func sendOptions(p PaymentParams) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout:    p.AttemptTimeout,
		ScheduleToCloseTimeout: p.SendWindow,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        30 * time.Second,
			NonRetryableErrorTypes: []string{ErrTypeKeyMismatch},
		},
	}
}

// lookupOptions: a lookup that keeps failing leaves the outcome unknown;
// the reconciliation loop, not the retry policy, decides when to look
// again.
var lookupOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumAttempts:    3,
	},
}

// Payment charges (kind "charge") or refunds (kind "refund") once for an
// event, with the key IdempotencyKey(effect, event id, op).
//
// A known outcome (succeeded, declined, invalid) is the result. An unknown
// one (timeout after sending, 5xx, connection reset mid-response) is
// reconciled as durable state: the key is looked up on durable timers with
// exponential backoff; what the provider has recorded becomes the result;
// a key the provider never saw is re-sent with the same key (only while the
// key is well inside its retention). Still unknown after EscalateAfter, the
// workflow escalates: FerryBlocked in the UI, its state in the memo and the
// StateQuery, and it keeps looking while it waits for an operator's
// Resolution (ResolveSignal). A key mismatch (422) fails the workflow with
// ErrTypeKeyMismatch.
func Payment(ctx workflow.Context, in workflows.EffectInput) (PaymentResult, error) {
	// Decoding the input's own bytes is deterministic; workflowcheck
	// cannot see through encoding/json's reflection.
	raw, err := decodeParams[PaymentParams](in.Params) //workflowcheck:ignore
	if err != nil {
		return PaymentResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidEvent, err)
	}
	params, err := raw.WithDefaults()
	if err != nil {
		return PaymentResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidEvent, err)
	}
	op := OpCharge
	if kind, _, _ := strings.Cut(in.Effect, ":"); kind == KindRefund {
		op = OpRefund
	}
	w := &payment{
		in:     in,
		params: params,
		st: PaymentState{
			Effect: in.Effect, EventID: in.EventID, Key: IdempotencyKey(in.Effect, in.EventID, op), Phase: PhasePreparing,
		},
	}
	w.decisions = newResolutions(ctx, &w.st.Rejected)
	if err := workflow.SetQueryHandler(ctx, StateQuery, func() (PaymentState, error) { return w.st, nil }); err != nil {
		return PaymentResult{}, err
	}
	return w.run(ctx, op)
}

type payment struct {
	in         workflows.EffectInput
	params     PaymentParams
	st         PaymentState
	decisions  resolutions
	resolvedBy string
	memoPhase  string
}

func (w *payment) run(ctx workflow.Context, op string) (PaymentResult, error) {
	var req PaymentRequest
	popts := prepareOptions
	if op == OpRefund {
		// A refund waits for its charge at most the send window; then
		// the workflow fails, visibly, instead of waiting forever.
		popts.ScheduleToCloseTimeout = w.params.SendWindow
	}
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, popts), PreparePaymentActivity, PrepareInput{
		Op:  op,
		Key: w.st.Key,
		Event: EffectEvent{
			ID: w.in.EventID, Type: w.in.EventType, AggregateType: w.in.AggregateType, AggregateID: w.in.AggregateID,
		},
	}).Get(ctx, &req)
	var appErr *temporal.ApplicationError
	switch {
	case errors.As(err, &appErr) && appErr.Type() == ErrTypeInvalidEvent:
		return w.finish(ctx, PaymentOutcome{Status: StatusInvalid, Code: ErrTypeInvalidEvent, Message: appErr.Message()}), nil
	case err != nil:
		return PaymentResult{}, err
	}
	w.st.Request = &req

	outcome, err := w.send(ctx)
	if err != nil {
		return PaymentResult{}, err
	}
	if outcome.Status == StatusUnknown {
		if outcome, err = w.reconcile(ctx, outcome); err != nil {
			return PaymentResult{}, err
		}
	}
	return w.finish(ctx, outcome), nil
}

// send sends the request with its key; every way of not knowing the answer
// is StatusUnknown. Only a key mismatch is an error.
func (w *payment) send(ctx workflow.Context) (PaymentOutcome, error) {
	w.st.Phase = PhaseSending
	w.st.Sends++
	if w.st.FirstSentAt.IsZero() {
		w.st.FirstSentAt = workflow.Now(ctx)
	}
	var out PaymentOutcome
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, sendOptions(w.params)), SendPaymentActivity, *w.st.Request).Get(ctx, &out)
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &appErr) && appErr.Type() == ErrTypeKeyMismatch:
		workflow.GetLogger(ctx).Error("idempotency key used with other parameters: a bug, not retried",
			"key", w.st.Key, "event_id", w.in.EventID, "error", appErr.Message())
		w.st.Phase = PhaseDone
		w.st.Outcome = &PaymentOutcome{Status: StatusInvalid, Code: ErrTypeKeyMismatch, Message: appErr.Message()}
		upsertMemo(ctx, w.memo())
		return PaymentOutcome{}, err
	case temporal.IsCanceledError(err):
		return PaymentOutcome{}, err
	default:
		return PaymentOutcome{Status: StatusUnknown, Message: err.Error()}, nil
	}
}

// reconcile turns an unknown outcome into the provider's truth.
func (w *payment) reconcile(ctx workflow.Context, outcome PaymentOutcome) (PaymentOutcome, error) {
	now := workflow.Now(ctx)
	w.st.UnknownSince = now
	w.st.EscalateAt = now.Add(w.params.EscalateAfter)
	w.st.Outcome = &outcome
	// The workflow never re-sends on its own after this: past it the
	// provider may have forgotten the key and would charge again.
	resendBefore := w.st.FirstSentAt.Add(w.params.KeyRetention / 2)
	workflow.GetLogger(ctx).Warn("payment outcome unknown: reconciling", "key", w.st.Key, "error", outcome.Message)

	delay := w.params.ReconcileInitial
	for outcome.Status == StatusUnknown {
		if !w.st.Escalated {
			w.st.Phase = PhaseReconciling
		}
		w.st.NextLookupAt = workflow.Now(ctx).Add(delay)
		if w.memoPhase != w.st.Phase {
			// Once per phase: the memo is for the UI, the query has
			// the live figures.
			w.memoPhase = w.st.Phase
			upsertMemo(ctx, w.memo())
		}

		lookNow := true
		if d, ok := w.decisions.wait(ctx, delay); ok {
			w.st.Resolution = &d
			switch d.Action {
			case ActionResolveSucceeded:
				outcome = PaymentOutcome{Status: StatusSucceeded, ID: d.ID, Code: "resolved_by_operator", Message: d.Reason}
				w.resolvedBy = d.Actor
				lookNow = false
			case ActionResolveFailed:
				outcome = PaymentOutcome{Status: StatusFailed, ID: d.ID, Code: "resolved_by_operator", Message: d.Reason}
				w.resolvedBy = d.Actor
				lookNow = false
			case ActionResend:
				var err error
				if outcome, err = w.send(ctx); err != nil {
					return outcome, err
				}
				lookNow = outcome.Status == StatusUnknown
			}
		}
		if ctx.Err() != nil {
			return outcome, temporal.NewCanceledError()
		}
		if lookNow {
			var err error
			if outcome, err = w.lookup(ctx, outcome, resendBefore); err != nil {
				return outcome, err
			}
		}
		if outcome.Status != StatusUnknown {
			w.st.Reconciled = true
			break
		}
		if !w.st.Escalated && !workflow.Now(ctx).Before(w.st.EscalateAt) {
			w.escalate(ctx)
		}
		delay = min(delay*2, w.params.ReconcileMax)
	}
	if w.st.Escalated {
		clearBlocked(ctx)
	}
	return outcome, nil
}

// lookup asks the provider about the key once; a key it never saw is
// re-sent (same key), unless escalated or too late in the key's retention.
func (w *payment) lookup(ctx workflow.Context, current PaymentOutcome, resendBefore time.Time) (PaymentOutcome, error) {
	w.st.Lookups++
	var res LookupResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, lookupOptions), LookupPaymentActivity, *w.st.Request).Get(ctx, &res)
	if err != nil {
		if temporal.IsCanceledError(err) {
			return current, err
		}
		current.Message = fmt.Sprintf("lookup failed: %v", err)
		return current, nil
	}
	switch res.Result {
	case LookupFound:
		workflow.GetLogger(ctx).Info("payment reconciled", "key", w.st.Key, "status", res.Outcome.Status, "id", res.Outcome.ID)
		return res.Outcome, nil
	case LookupNotFound:
		if w.st.Escalated || !workflow.Now(ctx).Before(resendBefore) {
			current.Message = "the provider has no record of the key; waiting for an operator"
			return current, nil
		}
		workflow.GetLogger(ctx).Info("provider never saw the key: sending again with it", "key", w.st.Key)
		out, err := w.send(ctx)
		if err == nil && out.Status != StatusUnknown {
			return out, nil
		}
		w.st.Phase = PhaseReconciling
		return out, err
	default:
		current.Message = "the provider is still processing the key"
		return current, nil
	}
}

func (w *payment) escalate(ctx workflow.Context) {
	w.st.Escalated = true
	w.st.Phase = PhaseEscalated
	workflow.GetLogger(ctx).Error("payment outcome still unknown: escalated for an operator",
		"key", w.st.Key, "event_id", w.in.EventID, "unknown_since", w.st.UnknownSince, "lookups", w.st.Lookups)
	setBlocked(ctx, w.in, ErrClassPaymentUnknown, workflow.Now(ctx))
}

func (w *payment) finish(ctx workflow.Context, outcome PaymentOutcome) PaymentResult {
	w.st.Phase = PhaseDone
	w.st.Outcome = &outcome
	w.st.NextLookupAt = time.Time{}
	upsertMemo(ctx, w.memo())
	return PaymentResult{
		Key: w.st.Key, Outcome: outcome, Reconciled: w.st.Reconciled, Lookups: w.st.Lookups, Sends: w.st.Sends, ResolvedBy: w.resolvedBy,
	}
}

func (w *payment) memo() map[string]any {
	m := map[string]any{"phase": w.st.Phase, "key": w.st.Key, "sends": w.st.Sends, "lookups": w.st.Lookups}
	if w.st.Outcome != nil {
		m["status"] = w.st.Outcome.Status
		if w.st.Outcome.ID != "" {
			m["id"] = w.st.Outcome.ID
		}
	}
	if !w.st.UnknownSince.IsZero() {
		m["unknown_since"] = w.st.UnknownSince
		m["escalate_at"] = w.st.EscalateAt
	}
	if w.st.Escalated {
		m["escalated"] = true
	}
	return m
}
