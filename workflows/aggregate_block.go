package workflows

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Quarantine and blocking: an event whose retries ran out holds its
// aggregate (or is skipped, by policy) until a repair decides; a blocked
// run keeps a bounded number of references and hands the rest back to
// PostgreSQL.

// quarantine records that ev could not be published: in PostgreSQL (status,
// last error, metric) and, unless the policy skips it, as the workflow's
// blocked state with search attributes for the UI.
func (s *aggregateState) quarantine(ctx workflow.Context, ev EventRef, cause error) error {
	class, msg := classify(cause)
	b := &Blocked{EventID: ev.ID, Version: ev.Version, EventType: ev.Type, ErrorClass: class, Error: msg, Since: workflow.Now(ctx)}
	bctx := workflow.WithActivityOptions(ctx, bookkeepingOptions)
	if err := workflow.ExecuteActivity(bctx, QuarantineActivity, QuarantineInput{
		EventID: ev.ID, EventType: ev.Type, ErrorClass: class, Error: msg,
		Epoch: s.epoch, AggregateType: s.ownerType(), AggregateID: s.ownerID(),
	}).Get(ctx, nil); err != nil {
		return err
	}
	workflow.GetLogger(ctx).Warn("event quarantined", "event_id", ev.ID, "version", ev.Version, "error_class", class, "error", msg)

	if s.policy(ev.Type).OnPoison == OnPoisonSkip {
		req := RepairRequest{
			RequestID: "policy-skip/" + ev.ID,
			Action:    "policy-skip",
			EventID:   ev.ID,
			Actor:     "ferry",
			Reason:    fmt.Sprintf("policy on_poison=skip for event type %q after %s: %s", ev.Type, class, msg),
		}
		var res RepairResult
		if err := workflow.ExecuteActivity(bctx, RepairActivity, RepairInput{
			Request: req, AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID, Version: ev.Version, Epoch: s.epoch,
		}).Get(ctx, &res); err != nil {
			return err
		}
		s.done(ev)
		return nil
	}
	s.blocked = b
	return s.upsertBlocked(ctx)
}

// waitForDecision waits until a repair decides the blocked event's fate (true)
// or the history needs a new run (false). A broker outage's quarantine is
// retried on its own after InfraRetryInterval. The error is the workflow's
// cancellation: a cancelled blocked workflow ends, it neither retries nor
// continues as new.
//
// With MaxBlockedRefs set it also takes the signals that arrive meanwhile,
// keeping at most that many references and handing the rest back to
// PostgreSQL (holdOverflow); a run without it leaves them in the channel
// until the block ends, as recorded histories did.
func (s *aggregateState) waitForDecision(ctx workflow.Context, signals workflow.ReceiveChannel) (bool, error) {
	bounded := s.cfg.maxBlocked > 0
	arrived := func() bool { return bounded && signals.Len() > 0 }
	cond := func() bool { return s.decision != nil || s.historyFull(ctx) || arrived() }
	for {
		if bounded {
			s.drain(signals)
			if err := s.holdOverflow(ctx); err != nil {
				return false, err
			}
		}
		if s.blocked.ErrorClass == ErrClassBroker {
			wait := InfraRetryInterval - workflow.Now(ctx).Sub(s.blocked.Since)
			ok, err := workflow.AwaitWithTimeout(ctx, max(wait, time.Second), cond)
			if err != nil {
				return false, err
			}
			if !ok {
				s.decision = &RepairRequest{Action: ActionRetry, EventID: s.blocked.EventID}
			}
		} else if err := workflow.Await(ctx, cond); err != nil {
			return false, err
		}
		if s.decision != nil || s.historyFull(ctx) {
			break
		}
	}
	if s.decision == nil {
		return false, nil
	}
	d := s.decision
	s.decision = nil
	if d.Action == ActionSkip {
		// The repair activity marked the row skipped and moved the cursor.
		s.done(s.pending[0])
	}
	s.blocked = nil
	_ = s.upsertBlocked(ctx)
	return true, s.releaseHeld(ctx)
}

// holdOverflow keeps the MaxBlockedRefs lowest pending references of a
// blocked run and hands the others back to PostgreSQL: their rows are
// pending again, and releaseHeld makes them claimable when the block ends.
// The references stay out of the run's state, history and continue-as-new
// input; the poller signals them again after the release.
func (s *aggregateState) holdOverflow(ctx workflow.Context) error {
	n := s.cfg.maxBlocked
	if n <= 0 || s.blocked == nil || len(s.pending) <= n {
		return nil
	}
	overflow := s.pending[n:]
	s.pending = slices.Clip(s.pending[:n])
	bctx := workflow.WithActivityOptions(ctx, bookkeepingOptions)
	for len(overflow) > 0 {
		part := overflow[:min(len(overflow), holdPart)]
		overflow = overflow[len(part):]
		ids := make([]string, len(part))
		for i, ev := range part {
			ids[i] = ev.ID
		}
		if err := workflow.ExecuteActivity(bctx, HoldEventsActivity, HoldInput{
			AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID, BlockedEventID: s.blocked.EventID, EventIDs: ids,
			Epoch: s.epoch,
		}).Get(ctx, nil); err != nil {
			return err
		}
		s.held = true
	}
	return nil
}

// holdPart bounds one HoldEventsActivity's input: 1,000 ids of 36 bytes.
const holdPart = 1000

// releaseHeld makes the events holdOverflow handed back claimable again,
// once the block that held them ended.
func (s *aggregateState) releaseHeld(ctx workflow.Context) error {
	if !s.held {
		return nil
	}
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, bookkeepingOptions), ReleaseHeldActivity,
		ReleaseHeldInput{AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID}).Get(ctx, nil)
	if err != nil {
		return err
	}
	s.held = false
	return nil
}

func (s *aggregateState) upsertBlocked(ctx workflow.Context) error {
	if s.blocked == nil {
		return workflow.UpsertTypedSearchAttributes(ctx,
			saBlocked.ValueSet(false),
			saBlockedEventID.ValueUnset(),
			saBlockedEventType.ValueUnset(),
			saErrorClass.ValueUnset(),
			saBlockedSince.ValueUnset(),
		)
	}
	return workflow.UpsertTypedSearchAttributes(ctx,
		saBlocked.ValueSet(true),
		saBlockedEventID.ValueSet(s.blocked.EventID),
		saBlockedEventType.ValueSet(s.blocked.EventType),
		saErrorClass.ValueSet(s.blocked.ErrorClass),
		saBlockedSince.ValueSet(s.blocked.Since),
	)
}

var (
	saBlocked          = temporal.NewSearchAttributeKeyBool(SABlocked)
	saBlockedEventID   = temporal.NewSearchAttributeKeyKeyword(SABlockedEventID)
	saBlockedEventType = temporal.NewSearchAttributeKeyKeyword(SABlockedEventType)
	saErrorClass       = temporal.NewSearchAttributeKeyKeyword(SAErrorClass)
	saBlockedSince     = temporal.NewSearchAttributeKeyTime(SABlockedSince)
)

// classify turns an activity failure into an error class (the activity's
// error type where it has one) and a message for operators.
func classify(err error) (class, msg string) {
	var appErr *temporal.ApplicationError
	var timeoutErr *temporal.TimeoutError
	switch {
	case errors.As(err, &appErr):
		return cmp.Or(appErr.Type(), ErrClassUnknown), appErr.Error()
	case errors.As(err, &timeoutErr):
		return ErrClassTimeout, timeoutErr.Error()
	default:
		return ErrClassUnknown, err.Error()
	}
}
