package effects

import (
	"errors"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/workflows"
)

// sendEmailOptions retry until the message is accepted: a 4xx, a dropped
// connection before the final "." and (under the resend policy) an
// ambiguous drop after it are retried; the sent-ledger keeps a retry after
// a confirmed send from sending again.
var sendEmailOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 3 * time.Minute,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:        time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        time.Minute,
		NonRetryableErrorTypes: []string{ErrTypeInvalidEvent, ErrTypeEmailRejected, ErrTypeEmailParked},
	},
}

var resolveEmailOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    30 * time.Second,
	},
}

// Email sends one e-mail for an event (effect "email:<template>") with the
// key IdempotencyKey(effect, event id, "send") and a Message-ID derived
// from it. A permanent refusal (5xx) or an event without an address is the
// result, not a failure. An ambiguous drop after the final "." is re-sent
// with the same Message-ID (policy "resend", counted) or, under the policy
// "park", escalated: FerryBlocked in the UI until an operator's Resolution
// (resend, succeeded, failed).
func Email(ctx workflow.Context, in workflows.EffectInput) (EmailResult, error) {
	_, template, _ := strings.Cut(in.Effect, ":")
	st := &EmailState{Effect: in.Effect, EventID: in.EventID, Key: IdempotencyKey(in.Effect, in.EventID, "send"), Phase: PhaseSending}
	if err := workflow.SetQueryHandler(ctx, StateQuery, func() (EmailState, error) { return *st, nil }); err != nil {
		return EmailResult{}, err
	}
	decisions := newResolutions(ctx, &st.Rejected)
	req := EmailRequest{
		Key: st.Key, Effect: in.Effect, Template: template,
		Event: EffectEvent{ID: in.EventID, Type: in.EventType, AggregateType: in.AggregateType, AggregateID: in.AggregateID},
	}
	finish := func(res EmailResult) (EmailResult, error) {
		if st.Escalated {
			clearBlocked(ctx)
		}
		st.Phase, st.Result = PhaseDone, &res
		upsertMemo(ctx, map[string]any{"phase": PhaseDone, "key": st.Key, "status": res.Status, "message_id": res.MessageID, "ambiguous": res.Ambiguous})
		return res, nil
	}
	for {
		var res EmailResult
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, sendEmailOptions), SendEmailActivity, req).Get(ctx, &res)
		var appErr *temporal.ApplicationError
		switch {
		case err == nil:
			return finish(res)
		case errors.As(err, &appErr) && appErr.Type() == ErrTypeInvalidEvent:
			return finish(EmailResult{Status: EmailInvalid, Key: st.Key, Reply: appErr.Message()})
		case errors.As(err, &appErr) && appErr.Type() == ErrTypeEmailRejected:
			var details EmailResult
			_ = appErr.Details(&details)
			details.Status, details.Key = EmailRejected, st.Key
			return finish(details)
		case errors.As(err, &appErr) && appErr.Type() == ErrTypeEmailParked:
		default:
			return EmailResult{}, err
		}

		// Parked: the last transaction's outcome is unknown and the policy
		// says an operator decides.
		st.LastError = appErr.Message()
		if !st.Escalated {
			st.Escalated, st.Phase = true, PhaseEscalated
			workflow.GetLogger(ctx).Error("e-mail delivery ambiguous: parked for an operator", "key", st.Key, "event_id", in.EventID)
			setBlocked(ctx, in, ErrClassEmailAmbiguous, workflow.Now(ctx))
			upsertMemo(ctx, map[string]any{"phase": PhaseEscalated, "key": st.Key, "last_error": st.LastError})
		}
		d, _ := decisions.wait(ctx, 0)
		if ctx.Err() != nil {
			return EmailResult{}, temporal.NewCanceledError()
		}
		st.Resolution = &d
		switch d.Action {
		case ActionResend, ActionLookup:
			req.Resend = true
			continue
		}
		status := EmailMarkedSent
		if d.Action == ActionResolveFailed {
			status = EmailMarkedFailed
		}
		if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, resolveEmailOptions), ResolveEmailActivity,
			EmailResolveInput{Key: st.Key, Status: status, Actor: d.Actor, Reason: d.Reason}).Get(ctx, &res); err != nil {
			return EmailResult{}, err
		}
		return finish(res)
	}
}
