package workflows

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Error classes of a quarantine that are not an activity's own error type.
const (
	ErrClassTimeout = "Timeout"
	ErrClassUnknown = "Unknown"
	// ErrClassBroker is the publish activity's error type when RabbitMQ is
	// unreachable (activities.ErrTypeBroker): an outage, not a poison event.
	ErrClassBroker = "BrokerUnavailable"
	// ErrClassLostOwnership is an activity's error type when the run's
	// aggregate is not owned under its epoch any more (Revision3): the run
	// fails rather than quarantine anything.
	ErrClassLostOwnership = "LostOwnership"
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
//
// The publish path is in aggregate_publish.go, quarantine and blocking in
// aggregate_block.go, repairs in aggregate_repair.go.
func Aggregate(ctx workflow.Context, in AggregateInput) error {
	st := newAggregateState(in)
	// Before the handlers, as recorded histories did: a handler that ran
	// during this local activity would put its commands before its marker.
	switch {
	case in.Resumed && in.Revision >= Revision2:
		// A run continued as new asks its worker again.
		if err := st.loadSettings(ctx); err != nil {
			return err
		}
	case in.Resumed:
	case in.Handoff:
		// The event the relay could not publish goes to the regular
		// path: read the cursor (and the settings) on their own.
		if err := st.loadCursor(ctx); err != nil {
			return err
		}
	case in.Revision >= Revision1:
		st.cursorUnknown = true // the first batch reads it (resolveCursor)
	default:
		if err := st.loadCursor(ctx); err != nil {
			return err
		}
	}
	st.add(in.Pending)
	if err := st.registerHandlers(ctx); err != nil {
		return err
	}

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
			decided, err := st.waitForDecision(ctx, signals)
			if err != nil {
				return err
			}
			if !decided {
				return st.continueAsNew(ctx, signals)
			}
			continue
		}

		if err := st.publishReady(ctx, signals); err != nil {
			return err
		}
		if st.historyFull(ctx) {
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
			workflow.GetLogger(ctx).Info("waiting for a missing version", "want", st.delivered+1, "have", st.pending[0].Version)
			var arg EventsSignalArg
			signals.Receive(ctx, &arg)
			st.receive(arg)
			continue
		}

		done, err := st.idle(ctx, signals)
		if err != nil || done {
			return err
		}
	}
}

// lostOwnership says an activity found the run's aggregate owned under
// another epoch (Revision3): nothing to quarantine, the run ends.
func lostOwnership(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == ErrClassLostOwnership
}

func newAggregateState(in AggregateInput) *aggregateState {
	st := &aggregateState{in: in, delivered: in.Delivered, blocked: in.Blocked, repairs: in.Repairs, held: in.Held,
		epoch: in.Epoch, regularNext: in.Handoff && !in.Resumed}
	if in.Revision >= Revision2 {
		// Placeholders until the worker answers (loadSettings,
		// publishBatch): nothing reads them before.
		st.cfg = workerSettings(Settings{})
	} else {
		st.cfg = inputSettings(in)
		st.settingsKnown = true
	}
	return st
}

// registerHandlers sets the state query, the repair update and the
// goroutine that takes repair signals.
func (s *aggregateState) registerHandlers(ctx workflow.Context) error {
	signals := workflow.GetSignalChannel(ctx, EventsSignal) // the main loop's channel
	if err := workflow.SetQueryHandler(ctx, StateQuery, func() (State, error) {
		st := s.snapshot()
		unread := signals.Len()
		st.Unread = &unread
		return st, nil
	}); err != nil {
		return err
	}
	// An update that names no event (or expects an error class) can only
	// have been accepted by code that knows the fields: rejected updates
	// leave no trace in history, so the update path needs no version.
	if err := workflow.SetUpdateHandlerWithOptions(ctx, RepairUpdate,
		func(ctx workflow.Context, req RepairRequest) (RepairResult, error) { return s.repair(ctx, req, true) },
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, req RepairRequest) error {
			return s.validate(req, true)
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
			if err := s.validate(req, byClass); err != nil {
				s.reject(ctx, req, err)
				continue
			}
			if _, err := s.repair(ctx, req, byClass); err != nil {
				s.reject(ctx, req, err)
			}
		}
	})
	return nil
}

// publishReady publishes the events that follow the delivered one, in
// batches where it can and one by one where it cannot, until none is
// ready, one is quarantined, or the history is full.
func (s *aggregateState) publishReady(ctx workflow.Context, signals workflow.ReceiveChannel) error {
	for ev, ok := s.next(); ok; ev, ok = s.next() {
		if !s.regularNext && s.publishBatch(ctx) > 0 {
			s.drain(signals)
			if s.historyFull(ctx) {
				return nil
			}
			continue
		}
		s.regularNext = false
		if err := s.publish(ctx, ev); err != nil {
			if temporal.IsCanceledError(err) || lostOwnership(err) {
				// Lost: another owner publishes the aggregate; this run
				// marks nothing more and fails, visibly.
				return err
			}
			if err := s.quarantine(ctx, ev, err); err != nil {
				return err
			}
			if s.blocked != nil {
				return nil
			}
			continue
		}
		s.drain(signals)
		if s.historyFull(ctx) {
			return nil
		}
	}
	return nil
}

// idle is the run's one idle wait, with nothing pending: it returns true
// when the run may complete.
//
// A one-shot run (that no operator repaired) completes at once. Any other
// waits for a signal or its idle timeout. On the timeout a signal that
// raced the timer must not be lost: the run takes what is buffered, and
// completes only when nothing is and no repair handler is still running.
// A signal that arrives while the completing workflow task runs makes the
// server reject the completion and hand the signal to a new task, so none
// is lost. (The worker's SDK counts that refusal in
// temporal_request_failure{operation="RespondWorkflowTaskCompleted",
// status_code="INVALID_ARGUMENT"}; the new task repeats the failed one's
// local activities. See docs/operating.md.)
//
// (A run an operator repaired idles like any other, so a repeated request
// is answered and its state stays queryable while the operator checks the
// result.)
func (s *aggregateState) idle(ctx workflow.Context, signals workflow.ReceiveChannel) (bool, error) {
	if s.epoch > 0 {
		// An operator repaired this run: it idles first, as in the
		// workflow lane, so that a repeated request is answered and its
		// state stays queryable while the operator checks the result.
		if len(s.repairs) > 0 {
			if !s.waitIdle(ctx, signals) {
				return false, nil
			}
			s.drain(signals)
			if len(s.pending) > 0 {
				return false, nil
			}
		}
		return s.release(ctx, signals)
	}
	if !s.in.OneShot || len(s.repairs) > 0 {
		if !s.waitIdle(ctx, signals) {
			return false, nil
		}
		s.drain(signals)
		if len(s.pending) > 0 {
			return false, nil
		}
	}
	if err := workflow.Await(ctx, func() bool { return s.handlersDone(ctx) }); err != nil {
		return false, err
	}
	s.drain(signals)
	return len(s.pending) == 0, nil
}

// waitIdle waits for a signal (false) or until the run has been idle for
// its idle timeout (true).
//
// Runs of Revision2, and older runs on the fast path, keep one timer
// across many signals: a signal does not cancel it, and when it fires
// early (work happened since it started) a new one covers the rest. That
// saves a timer's cancel and restart, two history events and their timer
// tasks, on every signal of a busy aggregate. Older runs without the fast
// path replay what they recorded: a new timer per wait, cancelled by the
// signal.
func (s *aggregateState) waitIdle(ctx workflow.Context, signals workflow.ReceiveChannel) bool {
	idle := s.cfg.idle
	keep := s.in.Revision >= Revision2 || s.cfg.batchSize > 0
	timer, cancel := s.idleTimer, func() {}
	if keep {
		now := workflow.Now(ctx)
		if s.idleSince.IsZero() {
			s.idleSince = now // add clears it when events arrive
		}
		if timer == nil {
			timer = workflow.NewTimer(ctx, max(s.idleSince.Add(idle).Sub(now), time.Millisecond))
			s.idleTimer = timer
		}
	} else {
		var timerCtx workflow.Context
		timerCtx, cancel = workflow.WithCancel(ctx)
		timer = workflow.NewTimer(timerCtx, idle)
	}
	fired := false
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(signals, func(c workflow.ReceiveChannel, _ bool) {
		var arg EventsSignalArg
		c.Receive(ctx, &arg)
		s.receive(arg)
	})
	sel.AddFuture(timer, func(workflow.Future) { fired = true })
	sel.Select(ctx)
	if !keep {
		cancel() // a signal came first: the timer is cancelled
		return fired
	}
	if !fired {
		return false
	}
	s.idleTimer = nil
	// Work happened since the timer started: idle for the rest.
	return !s.idleSince.IsZero() && workflow.Now(ctx).Sub(s.idleSince) >= idle
}

// historyFull says it is time to continue-as-new: checked after every
// event, so a hot aggregate whose events keep coming still rolls over.
func (s *aggregateState) historyFull(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= s.cfg.maxHistory
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

	idleTimer workflow.Future // the idle timer kept across signals, while it runs
	idleSince time.Time       // since when nothing new arrived; zero: busy

	// cfg are the run's settings: from its input before Revision2, from
	// its worker since (settingsKnown once the worker answered).
	cfg           runSettings
	settingsKnown bool

	// cursorUnknown: a fresh run of Revision1 or later that has not read
	// its delivered version yet; delivered is 0 until it has.
	cursorUnknown bool

	// held: holdOverflow handed events back during the current block.
	held bool

	// epoch: the publish-first lane handed the aggregate to this run under
	// it (Revision3); 0: the workflow lane. regularNext: the next event goes
	// straight to the regular path (a handoff after a failed publish).
	epoch       int64
	regularNext bool
}

const keepRepairs = 100

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
	next.Epoch = s.epoch
	next.Handoff, next.HandoffCause = false, ""
	return workflow.NewContinueAsNewError(ctx, AggregateWorkflowName, next)
}

func (s *aggregateState) drain(ch workflow.ReceiveChannel) {
	for {
		var arg EventsSignalArg
		if !ch.ReceiveAsync(&arg) {
			return
		}
		s.receive(arg)
	}
}

// receive takes one EventsSignal. A higher epoch than the run's is the
// publish-first lane handing the aggregate to this run anew (Revision3):
// the run takes it, and reads its cursor again before it publishes, since
// the lane may have published versions after the run's last one. Signals
// of the workflow lane carry no epoch.
func (s *aggregateState) receive(arg EventsSignalArg) {
	if arg.Epoch > s.epoch {
		s.epoch = arg.Epoch
		s.cursorUnknown = true
		s.regularNext = s.regularNext || arg.Handoff
	}
	s.add(arg.Events)
}

// ownerType and ownerID name the owner row an epoch is checked against;
// empty without an epoch, so inputs of the workflow lane stay as they were.
func (s *aggregateState) ownerType() string {
	if s.epoch == 0 {
		return ""
	}
	return s.in.AggregateType
}

func (s *aggregateState) ownerID() string {
	if s.epoch == 0 {
		return ""
	}
	return s.in.AggregateID
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
		Epoch:      s.epoch,
	}
}
