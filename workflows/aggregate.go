package workflows

import (
	"cmp"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// publishOptions: retries live here, not in loops. The publish activity is
// retried without limit: an event of an aggregate must not be skipped, and
// later events of the same aggregate wait for it. Operators see the retries
// (attempt count, last failure) on the pending activity in the Temporal UI.
// StartToCloseTimeout is also how long an attempt on a worker that died waits
// before it is retried: one publish and two short statements fit well in 10s.
var publishOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         retryWithoutLimit,
}

var cursorOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         retryWithoutLimit,
}

// retryWithoutLimit: 1s, 2s, 4s… capped at 30s, no attempt limit. Errors
// marked non-retryable (a row that is missing or does not match its
// signal) still fail at once.
var retryWithoutLimit = &temporal.RetryPolicy{
	InitialInterval:    time.Second,
	BackoffCoefficient: 2,
	MaximumInterval:    30 * time.Second,
}

// Aggregate is the per-aggregate workflow: it publishes the aggregate's events
// strictly in aggregate_version order, each once per run of the workflow
// (the activity is at-least-once; consumers deduplicate by message id).
func Aggregate(ctx workflow.Context, in AggregateInput) error {
	logger := workflow.GetLogger(ctx)
	idle := cmp.Or(in.IdleTimeout, DefaultIdleTimeout)
	maxHistory := cmp.Or(in.MaxHistoryEvents, DefaultMaxHistoryEvents)

	st := &aggregateState{delivered: in.Delivered}
	if !in.Resumed {
		var cur CursorResult
		lctx := workflow.WithLocalActivityOptions(ctx, cursorOptions)
		err := workflow.ExecuteLocalActivity(lctx, LoadCursorActivity,
			CursorInput{AggregateType: in.AggregateType, AggregateID: in.AggregateID}).Get(ctx, &cur)
		if err != nil {
			return err
		}
		st.delivered = cur.Delivered
	}
	st.add(in.Pending)

	if err := workflow.SetQueryHandler(ctx, StateQuery, func() (State, error) {
		return st.snapshot(), nil
	}); err != nil {
		return err
	}

	signals := workflow.GetSignalChannel(ctx, EventsSignal)
	actx := workflow.WithActivityOptions(ctx, publishOptions)
	for {
		st.drain(signals)
		for ev, ok := st.next(); ok; ev, ok = st.next() {
			st.publishing = ev.Version
			var res PublishResult
			err := workflow.ExecuteActivity(actx, PublishEventActivity, PublishInput{
				EventID:       ev.ID,
				AggregateType: in.AggregateType,
				AggregateID:   in.AggregateID,
				Version:       ev.Version,
			}).Get(ctx, &res)
			st.publishing = 0
			if err != nil {
				// Cancellation, termination, or a non-retryable error (the
				// row is missing or does not match its signal): the run
				// fails, visibly, and the aggregate waits at this version.
				return err
			}
			st.done(ev)
			st.drain(signals)
			if historyFull(ctx, maxHistory) {
				break
			}
		}

		if historyFull(ctx, maxHistory) {
			st.drain(signals)
			logger.Info("continuing as new", "delivered", st.delivered, "pending", len(st.pending))
			return workflow.NewContinueAsNewError(ctx, AggregateWorkflowName, AggregateInput{
				AggregateType:    in.AggregateType,
				AggregateID:      in.AggregateID,
				Resumed:          true,
				Delivered:        st.delivered,
				Pending:          st.pending,
				IdleTimeout:      in.IdleTimeout,
				MaxHistoryEvents: in.MaxHistoryEvents,
			})
		}

		if len(st.pending) > 0 {
			// A gap: a lower version is still on its way (another poller
			// holds it, or its lease has to run out first). Wait for it
			// however long it takes; the query shows what is missing.
			logger.Info("waiting for a missing version", "want", st.delivered+1, "have", st.pending[0].Version)
			var arg EventsSignalArg
			signals.Receive(ctx, &arg)
			st.add(arg.Events)
			continue
		}

		timerCtx, cancelTimer := workflow.WithCancel(ctx)
		timedOut := false
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(signals, func(c workflow.ReceiveChannel, _ bool) {
			var arg EventsSignalArg
			c.Receive(ctx, &arg)
			st.add(arg.Events)
		})
		sel.AddFuture(workflow.NewTimer(timerCtx, idle), func(workflow.Future) { timedOut = true })
		sel.Select(ctx)
		cancelTimer()
		if timedOut {
			// A signal that raced the timer must not be lost: take what is
			// buffered, and only complete when nothing is.
			st.drain(signals)
			if len(st.pending) == 0 {
				return nil
			}
		}
	}
}

// historyFull says it is time to continue-as-new: checked after every
// event, so a hot aggregate whose events keep coming still rolls over.
func historyFull(ctx workflow.Context, maxHistory int) bool {
	info := workflow.GetInfo(ctx)
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= maxHistory
}

// aggregateState is the workflow's durable state, rebuilt by replay.
type aggregateState struct {
	delivered  int64
	pending    []EventRef // ascending by Version, no duplicates, all > delivered
	duplicates int
	publishing int64
}

func (s *aggregateState) drain(ch workflow.ReceiveChannel) {
	for {
		var arg EventsSignalArg
		if !ch.ReceiveAsync(&arg) {
			return
		}
		s.add(arg.Events)
	}
}

func (s *aggregateState) add(events []EventRef) {
	for _, ev := range events {
		if ev.Version <= s.delivered {
			s.duplicates++
			continue
		}
		i, found := slices.BinarySearchFunc(s.pending, ev.Version, func(e EventRef, v int64) int {
			return cmp.Compare(e.Version, v)
		})
		if found {
			s.duplicates++
			continue
		}
		s.pending = slices.Insert(s.pending, i, ev)
	}
}

func (s *aggregateState) next() (EventRef, bool) {
	if len(s.pending) == 0 || s.pending[0].Version != s.delivered+1 {
		return EventRef{}, false
	}
	return s.pending[0], true
}

func (s *aggregateState) done(ev EventRef) {
	s.delivered = ev.Version
	s.pending = s.pending[1:]
}

func (s *aggregateState) snapshot() State {
	versions := make([]int64, len(s.pending))
	for i, ev := range s.pending {
		versions[i] = ev.Version
	}
	return State{Delivered: s.delivered, Pending: versions, Duplicates: s.duplicates, Publishing: s.publishing}
}
