package workflows

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/outbox"
)

// Error classes of a quarantine that are not an activity's own error type.
const (
	ErrClassTimeout = "Timeout"
	ErrClassUnknown = "Unknown"
	// ErrClassBroker is the publish activity's error type when RabbitMQ is
	// unreachable (activities.ErrTypeBroker): an outage, not a poison event.
	ErrClassBroker = "BrokerUnavailable"
)

// InfraRetryInterval: an event quarantined because the broker was
// unreachable is retried on its own after this, so an outage heals without
// an operator (the block stays visible meanwhile).
const InfraRetryInterval = 5 * time.Minute

// StartToCloseTimeout is also how long an attempt on a worker that died waits
// before it is retried: one publish and two short statements fit well in 10s.
const publishAttemptTimeout = 10 * time.Second

// retryWithoutLimit: 1s, 2s, 4s… capped at 30s, no attempt limit, for
// bookkeeping that must eventually happen (reading the cursor, marking a
// quarantine, writing an audit row). Non-retryable errors still fail at once.
var retryWithoutLimit = &temporal.RetryPolicy{
	InitialInterval:    time.Second,
	BackoffCoefficient: 2,
	MaximumInterval:    30 * time.Second,
}

// cursorOptions: LoadCursorActivity is retried until PostgreSQL answers.
// The ScheduleToCloseTimeout must be set: a local activity's defaults to its
// StartToCloseTimeout (the SDK's rule), which ended the retries after 10 s
// of an outage and failed the run, leaving its events dispatched in
// PostgreSQL and held by no run (the next run waited for them for ever).
var cursorOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    10 * time.Second,
	ScheduleToCloseTimeout: localRetryWithoutLimit,
	RetryPolicy:            retryWithoutLimit,
}

// localRetryWithoutLimit is the ScheduleToCloseTimeout of a local activity
// that is retried without limit: a year, in effect none. (Zero would mean
// StartToCloseTimeout.) Changing it changes no command a recorded history
// holds, so recorded histories replay.
const localRetryWithoutLimit = 365 * 24 * time.Hour

// fastPathOptions: one attempt. A failed batch falls back to PublishEvent
// for its first event, whose attempts the policy bounds and the UI shows.
var fastPathOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: publishAttemptTimeout,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
}

var bookkeepingOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         retryWithoutLimit,
}

// publishOptions bounds the publish activity's retries by the event type's
// policy; when they run out the event is quarantined, never dropped.
// Operators see the attempts and the last failure on the pending activity in
// the Temporal UI.
func publishOptions(p EventPolicy) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout: publishAttemptTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
			MaximumAttempts:    cmp.Or(p.MaxAttempts, DefaultMaxAttempts),
		},
	}
}

// Aggregate is the per-aggregate workflow: it publishes the aggregate's events
// strictly in aggregate_version order, each once per run of the workflow
// (the activity is at-least-once; consumers deduplicate by message id). An
// event whose retries run out is quarantined: the aggregate waits for an
// operator's repair (or skips it, by policy) while other aggregates flow.
func Aggregate(ctx workflow.Context, in AggregateInput) error {
	logger := workflow.GetLogger(ctx)
	idle := cmp.Or(in.IdleTimeout, DefaultIdleTimeout)
	maxHistory := cmp.Or(in.MaxHistoryEvents, DefaultMaxHistoryEvents)

	st := &aggregateState{in: in, delivered: in.Delivered, blocked: in.Blocked, repairs: in.Repairs, held: in.Held}
	if !in.Resumed {
		if in.Revision >= Revision1 {
			st.cursorUnknown = true // the first batch reads it (resolveCursor)
		} else if err := st.loadCursor(ctx); err != nil {
			return err
		}
	}
	st.add(in.Pending)

	if err := workflow.SetQueryHandler(ctx, StateQuery, func() (State, error) {
		return st.snapshot(), nil
	}); err != nil {
		return err
	}
	// An update that names no event (or expects an error class) can only
	// have been accepted by code that knows the fields: rejected updates
	// leave no trace in history, so the update path needs no version.
	if err := workflow.SetUpdateHandlerWithOptions(ctx, RepairUpdate,
		func(ctx workflow.Context, req RepairRequest) (RepairResult, error) { return st.repair(ctx, req, true) },
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, req RepairRequest) error {
			return st.validate(req, true)
		}}); err != nil {
		return err
	}
	repairSignals := workflow.GetSignalChannel(ctx, RepairSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var req RepairRequest
			repairSignals.Receive(ctx, &req)
			// Runs recorded before repairs by error class rejected a
			// signal without an event id; they replay that way.
			byClass := req.byClass() &&
				workflow.GetVersion(ctx, repairByClassChange, workflow.DefaultVersion, 1) >= 1
			if err := st.validate(req, byClass); err != nil {
				st.reject(ctx, req, err)
				continue
			}
			if _, err := st.repair(ctx, req, byClass); err != nil {
				st.reject(ctx, req, err)
			}
		}
	})

	signals := workflow.GetSignalChannel(ctx, EventsSignal)
	for {
		st.drain(signals)
		if st.cursorUnknown {
			if err := st.resolveCursor(ctx); err != nil {
				return err
			}
			st.drain(signals)
		}

		if st.blocked != nil {
			decided, err := st.waitForDecision(ctx, maxHistory, signals)
			if err != nil {
				return err
			}
			if !decided {
				return st.continueAsNew(ctx, signals)
			}
			continue
		}

		for ev, ok := st.next(); ok; ev, ok = st.next() {
			if st.publishBatch(ctx) > 0 {
				st.drain(signals)
				if historyFull(ctx, maxHistory) {
					break
				}
				continue
			}
			if err := st.publish(ctx, ev); err != nil {
				if temporal.IsCanceledError(err) {
					return err
				}
				if err := st.quarantine(ctx, ev, err); err != nil {
					return err
				}
				if st.blocked != nil {
					break
				}
				continue
			}
			st.drain(signals)
			if historyFull(ctx, maxHistory) {
				break
			}
		}

		if historyFull(ctx, maxHistory) {
			return st.continueAsNew(ctx, signals)
		}
		if st.blocked != nil {
			continue
		}

		if len(st.pending) > 0 {
			if _, ok := st.next(); ok {
				continue
			}
			// A gap: a lower version is still on its way (another poller
			// holds it, or its lease has to run out first). Wait for it
			// however long it takes; the query shows what is missing.
			logger.Info("waiting for a missing version", "want", st.delivered+1, "have", st.pending[0].Version)
			var arg EventsSignalArg
			signals.Receive(ctx, &arg)
			st.add(arg.Events)
			continue
		}

		if st.in.OneShot && len(st.repairs) == 0 {
			// (A run an operator repaired idles like any other, so a
			// repeated request is answered and its state stays queryable
			// while the operator checks the result.)
			done, err := st.finish(ctx, signals)
			if err != nil || done {
				return err
			}
			continue
		}
		if st.fastPath() {
			done, err := st.waitIdle(ctx, signals, idle)
			if err != nil || done {
				return err
			}
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
			// buffered, and only complete when nothing is and no repair
			// handler is still running.
			st.drain(signals)
			if len(st.pending) == 0 {
				if err := workflow.Await(ctx, func() bool { return st.handlersDone(ctx) }); err != nil {
					return err
				}
				st.drain(signals)
				if len(st.pending) == 0 {
					return nil
				}
			}
		}
	}
}

// waitIdle waits for a signal, or completes the workflow (true) once it
// has been idle for idle. One timer serves many signals: a signal does not
// cancel it, and when it fires early (work happened since it started) a
// new one covers the rest. That saves a timer's cancel and restart, two
// history events and their timer tasks, on every signal of a busy
// aggregate. Runs on the fast path only; older runs replay the timer they
// recorded (a new one per wait, cancelled by the signal).
func (s *aggregateState) waitIdle(ctx workflow.Context, signals workflow.ReceiveChannel, idle time.Duration) (bool, error) {
	now := workflow.Now(ctx)
	if s.idleSince.IsZero() {
		s.idleSince = now // add clears it when events arrive
	}
	if s.idleTimer == nil {
		s.idleTimer = workflow.NewTimer(ctx, max(s.idleSince.Add(idle).Sub(now), time.Millisecond))
	}
	fired := false
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(signals, func(c workflow.ReceiveChannel, _ bool) {
		var arg EventsSignalArg
		c.Receive(ctx, &arg)
		s.add(arg.Events)
	})
	sel.AddFuture(s.idleTimer, func(workflow.Future) { fired = true })
	sel.Select(ctx)
	if !fired {
		return false, nil
	}
	s.idleTimer = nil
	if s.idleSince.IsZero() || workflow.Now(ctx).Sub(s.idleSince) < idle {
		// Work happened since the timer started: idle for the rest.
		return false, nil
	}
	// A signal that raced the timer must not be lost: take what is
	// buffered, and only complete when nothing is and no repair handler is
	// still running.
	s.drain(signals)
	if len(s.pending) > 0 {
		return false, nil
	}
	if err := workflow.Await(ctx, func() bool { return s.handlersDone(ctx) }); err != nil {
		return false, err
	}
	s.drain(signals)
	return len(s.pending) == 0, nil
}

// finish is a one-shot run's end: it completes (true) once no repair
// handler runs and no signal is buffered. A signal that arrives while the
// completing workflow task runs makes the server reject the completion and
// hand the signal to a new task, so none is lost.
func (s *aggregateState) finish(ctx workflow.Context, signals workflow.ReceiveChannel) (bool, error) {
	if err := workflow.Await(ctx, func() bool { return s.handlersDone(ctx) }); err != nil {
		return false, err
	}
	s.drain(signals)
	return len(s.pending) == 0, nil
}

// loadCursor reads the delivered version from PostgreSQL.
func (s *aggregateState) loadCursor(ctx workflow.Context) error {
	var cur CursorResult
	lctx := workflow.WithLocalActivityOptions(ctx, cursorOptions)
	err := workflow.ExecuteLocalActivity(lctx, LoadCursorActivity,
		CursorInput{AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID}).Get(ctx, &cur)
	if err != nil {
		return err
	}
	s.setCursor(cur.Delivered)
	return nil
}

// resolveCursor learns where a fresh run starts: from its first batch,
// which reads the cursor and publishes what follows it in one local
// activity, or, when that fails or there is nothing to publish yet, from
// LoadCursorActivity (retried until it answers).
func (s *aggregateState) resolveCursor(ctx workflow.Context) error {
	s.publishBatch(ctx)
	if !s.cursorUnknown {
		return nil
	}
	return s.loadCursor(ctx)
}

// setCursor records the delivered version read from PostgreSQL and drops
// the pending events at or below it: an earlier run published them.
func (s *aggregateState) setCursor(delivered int64) {
	s.cursorUnknown = false
	s.delivered = max(s.delivered, delivered)
	n := 0
	for n < len(s.pending) && s.pending[n].Version <= s.delivered {
		n++
	}
	s.duplicates += n
	s.pending = s.pending[n:]
}

// historyFull says it is time to continue-as-new: checked after every
// event, so a hot aggregate whose events keep coming still rolls over.
func historyFull(ctx workflow.Context, maxHistory int) bool {
	info := workflow.GetInfo(ctx)
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= maxHistory
}

// aggregateState is the workflow's durable state, rebuilt by replay.
type aggregateState struct {
	in         AggregateInput
	delivered  int64
	pending    []EventRef // ascending by Version, no duplicates, all > delivered
	duplicates int
	publishing int64

	blocked   *Blocked
	decision  *RepairRequest // set by a repair, taken by the main loop
	repairing bool           // a repair's activity is running
	repairs   []RepairResult // recent results, for idempotency by request id
	rejected  []string

	effects EffectCounts // effect workflow starts (effects.go)

	idleTimer workflow.Future // the fast path's idle timer, while it runs
	idleSince time.Time       // since when nothing new arrived; zero: busy

	// cursorUnknown: a fresh run of Revision1 or later that has not read
	// its delivered version yet; delivered is 0 until it has.
	cursorUnknown bool

	// held: holdOverflow handed events back during the current block.
	held bool
}

const keepRepairs = 100

func (s *aggregateState) policy(eventType string) EventPolicy {
	if p, ok := s.in.Policies[eventType]; ok {
		return p
	}
	return s.in.Policies["*"]
}

func (s *aggregateState) publish(ctx workflow.Context, ev EventRef) error {
	s.publishing = ev.Version
	defer func() { s.publishing = 0 }()
	actx := workflow.WithActivityOptions(ctx, publishOptions(s.policy(ev.Type)))
	var res PublishResult
	err := workflow.ExecuteActivity(actx, PublishEventActivity, PublishInput{
		EventID:       ev.ID,
		AggregateType: s.in.AggregateType,
		AggregateID:   s.in.AggregateID,
		Version:       ev.Version,
	}).Get(ctx, &res)
	if err == nil {
		s.done(ev)
		s.startEffects(ctx, ev, res.Effects)
	}
	return err
}

// publishBatch publishes the run of consecutive pending events after the
// delivered one, up to the batch size, in one local activity: one marker in
// history for the whole run instead of an activity's three events (and a
// workflow task) per event. It returns how many events it published; 0
// means the caller publishes the next event on the regular path, where
// retries, timeouts and the last failure are visible in the Temporal UI.
func (s *aggregateState) publishBatch(ctx workflow.Context) int {
	if !s.fastPath() {
		return 0
	}
	var run []EventRef
	if s.cursorUnknown {
		// Where the run starts is the activity's to find out.
		run = slices.Clone(s.pending[:min(len(s.pending), s.in.PublishBatchSize)])
	} else {
		run = s.run(s.in.PublishBatchSize)
	}
	if len(run) == 0 {
		return 0
	}
	s.publishing = run[0].Version
	defer func() { s.publishing = 0 }()
	var res PublishBatchResult
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, fastPathOptions), PublishBatchActivity,
		PublishBatchInput{AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID, Events: run,
			LoadCursor: s.cursorUnknown}).Get(ctx, &res)
	if err != nil {
		workflow.GetLogger(ctx).Info("fast path failed; publishing the event on the regular path, with retries",
			"version", run[0].Version, "error", err)
		return 0
	}
	if s.cursorUnknown {
		s.setCursor(res.Cursor)
	}
	n := min(res.Published, len(run))
	if res.Stopped != "" {
		workflow.GetLogger(ctx).Info("fast path stopped early", "published", n, "of", len(run), "reason", res.Stopped)
	}
	effects := map[int64][]EffectStart{}
	for _, e := range res.Effects {
		effects[e.Version] = e.Effects
	}
	published := 0
	for range n {
		ev, ok := s.next()
		if !ok {
			break // the activity cannot have published past a gap
		}
		s.done(ev)
		s.startEffects(ctx, ev, effects[ev.Version])
		published++
	}
	return published
}

// fastPath says whether this run publishes in batches: when its input
// asks for it. Histories recorded before the fast path have no batch size
// in their input and replay the regular path. (A GetVersion marker would
// do the same, but it upserts the TemporalChangeVersion search attribute
// on every run: a visibility write per workflow, a sixth of the embedded
// server's CPU for aggregates with one event each.)
func (s *aggregateState) fastPath() bool {
	return s.in.PublishBatchSize > 0
}

// run is the longest prefix of pending, at most size events, whose
// versions follow the delivered one without a gap.
func (s *aggregateState) run(size int) []EventRef {
	n := 0
	for n < len(s.pending) && n < size && s.pending[n].Version == s.delivered+1+int64(n) {
		n++
	}
	return slices.Clone(s.pending[:n])
}

// quarantine records that ev could not be published: in PostgreSQL (status,
// last error, metric) and, unless the policy skips it, as the workflow's
// blocked state with search attributes for the UI.
func (s *aggregateState) quarantine(ctx workflow.Context, ev EventRef, cause error) error {
	class, msg := classify(cause)
	b := &Blocked{EventID: ev.ID, Version: ev.Version, EventType: ev.Type, ErrorClass: class, Error: msg, Since: workflow.Now(ctx)}
	bctx := workflow.WithActivityOptions(ctx, bookkeepingOptions)
	if err := workflow.ExecuteActivity(bctx, QuarantineActivity, QuarantineInput{
		EventID: ev.ID, EventType: ev.Type, ErrorClass: class, Error: msg,
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
			Request: req, AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID, Version: ev.Version,
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
func (s *aggregateState) waitForDecision(ctx workflow.Context, maxHistory int, signals workflow.ReceiveChannel) (bool, error) {
	bounded := s.in.MaxBlockedRefs > 0
	arrived := func() bool { return bounded && signals.Len() > 0 }
	cond := func() bool { return s.decision != nil || historyFull(ctx, maxHistory) || arrived() }
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
		if s.decision != nil || historyFull(ctx, maxHistory) {
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
	n := s.in.MaxBlockedRefs
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

// validate accepts a repair request only for the blocked event, with an
// actor, a reason and (for patch) a payload that would be accepted as a new
// event. A request id seen before is always accepted: it answers with the
// earlier result.
//
// byClass turns on repairs by error class: a request without an event id
// then means "whatever is blocked here", and ExpectErrorClass, when set,
// must be the blocked event's class. Off, a request must name the blocked
// event (what runs recorded before the fields replay).
func (s *aggregateState) validate(req RepairRequest, byClass bool) error {
	if req.RequestID == "" {
		return errors.New("request_id is empty: send a unique id so a retry of this request is applied once")
	}
	if _, ok := s.findRepair(req.RequestID); ok {
		return nil
	}
	switch {
	case req.Actor == "":
		return errors.New("actor is empty: say who asks for the repair")
	case req.Reason == "":
		return errors.New("reason is empty: say why, for the audit trail")
	case req.Action != ActionRetry && req.Action != ActionSkip && req.Action != ActionPatch:
		return fmt.Errorf("action %q: use retry, skip or patch", req.Action)
	case s.blocked == nil:
		return fmt.Errorf("aggregate %s/%s is not blocked: nothing to repair", s.in.AggregateType, s.in.AggregateID)
	case byClass && req.EventID == "" && req.ExpectErrorClass == "":
		return errors.New("event_id is empty: name the blocked event, or set expect_error_class to repair whatever is blocked here with that class")
	case (!byClass || req.EventID != "") && req.EventID != s.blocked.EventID:
		return fmt.Errorf("event %s is not the blocked event: %s/%s is blocked at event %s (v%d)",
			req.EventID, s.in.AggregateType, s.in.AggregateID, s.blocked.EventID, s.blocked.Version)
	case byClass && req.ExpectErrorClass != "" && req.ExpectErrorClass != s.blocked.ErrorClass:
		return fmt.Errorf("%s/%s is blocked at event %s (v%d) with error class %s, not the expected %s",
			s.in.AggregateType, s.in.AggregateID, s.blocked.EventID, s.blocked.Version, s.blocked.ErrorClass, req.ExpectErrorClass)
	case s.repairing || s.decision != nil:
		return errors.New("another repair of this event is in progress")
	}
	if req.Action == ActionPatch {
		if len(req.Payload) == 0 && req.SchemaVersion == 0 {
			return errors.New("patch needs a payload, a schema_version or both")
		}
		if req.SchemaVersion < 0 {
			return fmt.Errorf("schema_version %d: must be at least 1", req.SchemaVersion)
		}
		if len(req.Payload) > 0 {
			if err := outbox.ValidatePayload(req.Payload, outbox.DefaultMaxPayloadBytes); err != nil {
				return err
			}
		}
	} else if len(req.Payload) > 0 || req.SchemaVersion != 0 {
		return fmt.Errorf("payload and schema_version go with patch, not %s", req.Action)
	}
	return nil
}

// repair applies a validated request: the activity writes the audit row and
// changes the outbox row; the main loop then acts on the decision.
//
// A request that names no event is applied to the blocked one and audited
// under "<request id>/<event id>": one batch request reaches many
// aggregates, and ferry_repairs keeps one row per request id.
func (s *aggregateState) repair(ctx workflow.Context, req RepairRequest, byClass bool) (RepairResult, error) {
	if prev, ok := s.findRepair(req.RequestID); ok {
		prev.Duplicate = true
		return prev, nil
	}
	// Validated before, but another handler may have decided since.
	if err := s.validate(req, byClass); err != nil {
		return RepairResult{}, err
	}
	s.repairing = true
	defer func() { s.repairing = false }()
	audited := req
	if req.EventID == "" {
		audited.EventID = s.blocked.EventID
		audited.RequestID = req.RequestID + "/" + s.blocked.EventID
	}
	var res RepairResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, bookkeepingOptions), RepairActivity, RepairInput{
		Request: audited, AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID, Version: s.blocked.Version,
	}).Get(ctx, &res)
	if err != nil {
		return RepairResult{}, err
	}
	res.RequestID = req.RequestID // what a repeat of the request is matched by
	s.repairs = append(s.repairs, res)
	if len(s.repairs) > keepRepairs {
		s.repairs = s.repairs[len(s.repairs)-keepRepairs:]
	}
	s.decision = &req
	return res, nil
}

func (s *aggregateState) findRepair(requestID string) (RepairResult, bool) {
	for _, r := range s.repairs {
		if r.RequestID == requestID {
			return r, true
		}
	}
	return RepairResult{}, false
}

// reject drops a repair signal and makes the reason visible where an
// operator looks, not only in the state query: the worker's log (a
// warning), the workflow's memo (MemoRepairRejected, shown in the UI and
// written to history) and the SDK metric ferry_repair_rejected, counted by
// whatever metrics handler the worker's client has.
func (s *aggregateState) reject(ctx workflow.Context, req RepairRequest, err error) {
	line := fmt.Sprintf("%s %s (request %s): %v", req.Action, cmp.Or(req.EventID, "by class "+req.ExpectErrorClass), req.RequestID, err)
	s.rejected = append(s.rejected, line)
	if len(s.rejected) > 20 {
		s.rejected = s.rejected[len(s.rejected)-20:]
	}
	workflow.GetLogger(ctx).Warn("repair rejected", "request_id", req.RequestID, "action", req.Action,
		"event_id", req.EventID, "expect_error_class", req.ExpectErrorClass, "reason", err.Error())
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"action": req.Action}).Counter("ferry_repair_rejected").Inc(1)
	// Runs recorded before the memo rejected without a command.
	if workflow.GetVersion(ctx, rejectionMemoChange, workflow.DefaultVersion, 1) >= 1 {
		if merr := workflow.UpsertMemo(ctx, map[string]any{MemoRepairRejected: line}); merr != nil {
			workflow.GetLogger(ctx).Warn("could not record the rejected repair in the memo", "error", merr)
		}
	}
}

// Change ids of workflow.GetVersion in the aggregate workflow.
const (
	// repairByClassChange: a repair signal without an event id, or with
	// an expected error class (RepairRequest.ExpectErrorClass).
	repairByClassChange = "repair-by-class"
	// rejectionMemoChange: a rejected repair signal upserts
	// MemoRepairRejected.
	rejectionMemoChange = "repair-rejection-memo"
)

func (s *aggregateState) handlersDone(ctx workflow.Context) bool {
	return workflow.AllHandlersFinished(ctx) && !s.repairing
}

// continueAsNew hands the whole state to a new run, once no repair is half
// done and every buffered signal is taken.
func (s *aggregateState) continueAsNew(ctx workflow.Context, signals workflow.ReceiveChannel) error {
	// A hold's activity lets more signals (and repairs) in: take them too,
	// or the new run would never see them.
	for {
		if err := workflow.Await(ctx, func() bool { return s.handlersDone(ctx) }); err != nil {
			return err
		}
		s.drain(signals)
		if err := s.holdOverflow(ctx); err != nil {
			return err
		}
		if signals.Len() == 0 && s.handlersDone(ctx) {
			break
		}
	}
	workflow.GetLogger(ctx).Info("continuing as new", "delivered", s.delivered, "pending", len(s.pending), "blocked", s.blocked != nil)
	next := s.in
	next.Held = s.held
	next.Resumed = true
	next.Delivered = s.delivered
	next.Pending = s.pending
	next.Blocked = s.blocked
	next.Repairs = s.repairs
	return workflow.NewContinueAsNewError(ctx, AggregateWorkflowName, next)
}

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
		s.idleSince = time.Time{}
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
	return State{
		Delivered:  s.delivered,
		Pending:    versions,
		Duplicates: s.duplicates,
		Publishing: s.publishing,
		Blocked:    s.blocked,
		Rejected:   slices.Clone(s.rejected),
		Effects:    s.effects,
	}
}
