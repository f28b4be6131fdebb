package workflows

import (
	"encoding/json"
	"time"

	"github.com/ferry-outbox/ferry/relaydb"
)

// Registered names. Wire contract: never rename.
const (
	// AggregateWorkflowName is the workflow type of the per-aggregate workflow.
	AggregateWorkflowName = "ferry.Aggregate"
	// EventsSignal carries an EventsSignalArg to an aggregate workflow.
	EventsSignal = "ferry.events"
	// StateQuery returns the workflow's State.
	StateQuery = "ferry.state"
	// PublishEventActivity publishes one event and marks it published.
	PublishEventActivity = "ferry.PublishEvent"
	// LoadCursorActivity reads the aggregate's delivered version (a local activity).
	LoadCursorActivity = "ferry.LoadAggregateCursor"
	// PublishBatchActivity publishes consecutive events of one aggregate in
	// one confirm window and marks them published: the fast path, run as a
	// local activity (PublishBatchInput).
	PublishBatchActivity = "ferry.PublishBatch"
	// ReleaseAggregateActivity gives an aggregate a run owns back to the
	// publish-first lane (ReleaseInput), under the run's epoch: Revision3.
	// A regular activity, not a local one: its result is in history even
	// when the completion that follows it is refused (a signal racing it),
	// so the run never asks twice.
	ReleaseAggregateActivity = "ferry.ReleaseAggregate"
)

// DefaultTaskQueue is the task queue of the aggregate workflows when none
// is set: pollers start them there (poller.Config.TaskQueue) and workers
// poll it (worker.Config.TaskQueue).
const DefaultTaskQueue = "ferry"

// Defaults of the aggregate workflow's settings (Settings; and of
// AggregateInput's fields of the same names for runs before Revision2).
const (
	// DefaultIdleTimeout: a workflow with nothing to do completes after this.
	DefaultIdleTimeout = time.Minute
	// DefaultMaxHistoryEvents: continue-as-new once history is this long,
	// far below Temporal's 10,240-event warning.
	DefaultMaxHistoryEvents = 4000
	// DefaultMaxBlockedRefs: event references a blocked run keeps. A
	// reference is about 80 bytes of JSON, so the state and the
	// continue-as-new input stay near 400 KB, under Temporal's 512 KB
	// payload warning and far under its 2 MB limit.
	DefaultMaxBlockedRefs = 5000
	// DefaultPublishBatchSize: events per fast-path publish. A confirm
	// window of 100 messages takes a few milliseconds; payloads are loaded
	// for the whole batch at once, so this also bounds the activity's memory.
	DefaultPublishBatchSize = 100
)

// Behaviour revisions of the aggregate workflow, chosen by its input
// (AggregateInput.Revision) so that every recorded history replays as it
// was recorded: a revision is never changed, only added.
const (
	// Revision1: a fresh run learns its cursor from its first batch
	// (PublishBatchInput.LoadCursor: one local activity where there were
	// two), and starts effect workflows without a GetVersion marker (whose
	// TemporalChangeVersion upsert is a visibility write per run).
	Revision1 = 1
	// Revision2: the run takes its settings (Settings) from the worker
	// that runs it, through the result of its first activity
	// (PublishBatchInput.Settings, CursorInput.Settings); a run continued
	// as new asks again, by LoadCursorActivity. Its input carries none, and
	// it waits idle on one timer that signals do not cancel whatever its
	// batch size.
	Revision2 = 2
	// Revision3: the run may own its aggregate under an epoch
	// (AggregateInput.Epoch, EventsSignalArg.Epoch): the publish-first
	// lane handed the aggregate to it. Such a run fences every mark with
	// its epoch, releases the aggregate back to the lane when it has
	// published what it was handed (ReleaseAggregateActivity) instead of
	// idling, and fails (ErrTypeLostOwnership) when another owner took the
	// aggregate. A run without an epoch, Revision3 or not, runs as
	// Revision2. Relays of the workflow lane start Revision2 runs, so their
	// histories and costs stay what they were.
	Revision3 = 3
	// CurrentRevision is what pollers of the workflow lane start new runs
	// with.
	CurrentRevision = Revision2
	// LaneRevision is what relays of the publish-first lane start runs
	// with.
	LaneRevision = Revision3
)

// EventRef points at a committed outbox row. Payloads never travel through
// Temporal: they stay in PostgreSQL, keeping history small and personal data
// out of it.
type EventRef struct {
	ID      string `json:"id"`
	Version int64  `json:"version"`
	Type    string `json:"type"`
}

// EventsSignalArg is the payload of EventsSignal: one or more events of the
// workflow's aggregate, in any order, possibly already seen.
type EventsSignalArg struct {
	Events []EventRef `json:"events"`
	// Epoch is the ownership epoch the relay handed the events under (the
	// publish-first lane; 0 in the workflow lane). A run that receives a
	// higher epoch than its own takes it: the lane handed the aggregate to
	// it anew, so it reads its cursor again (the lane may have published
	// versions meanwhile) and marks under the new epoch.
	Epoch int64 `json:"epoch,omitempty"`
	// Handoff: the lane hands the aggregate over with this signal because
	// publishing Events[0] failed: the run publishes it on the regular path
	// (AggregateInput.Handoff says why).
	Handoff bool `json:"handoff,omitempty"`
}

// AggregateInput starts (or continues) an aggregate workflow.
type AggregateInput struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	// Resumed is set on continue-as-new: Delivered and Pending are then
	// authoritative. A fresh run loads Delivered from PostgreSQL.
	Resumed   bool       `json:"resumed,omitempty"`
	Delivered int64      `json:"delivered,omitempty"`
	Pending   []EventRef `json:"pending,omitempty"`
	// IdleTimeout, MaxHistoryEvents, PublishBatchSize, Policies and
	// MaxBlockedRefs are the settings of runs before Revision2, as their
	// pollers passed them; a run of Revision2 or later ignores them and
	// asks its worker (Settings). Pollers no longer set them.
	//
	// IdleTimeout; zero means DefaultIdleTimeout.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// MaxHistoryEvents; zero means DefaultMaxHistoryEvents.
	MaxHistoryEvents int `json:"max_history_events,omitempty"`
	// PublishBatchSize is the most events one fast-path publish takes.
	// Zero or less: no fast path, one regular activity per event (and the
	// idle timer of older runs), which is what histories recorded before
	// the fast path replay.
	//
	// Upgrading a deployment from a Ferry without the fast path: upgrade
	// the workers before the pollers, or an old worker may run a workflow
	// started with a batch size the regular way and a new one fail to
	// replay it.
	PublishBatchSize int `json:"publish_batch_size,omitempty"`
	// Policies by event type; "*" applies to types without an entry.
	Policies map[string]EventPolicy `json:"policies,omitempty"`
	// Revision is the behaviour revision the poller started the run with
	// (CurrentRevision); continue-as-new keeps it. Zero: a run started
	// before revisions, which replays as it was recorded. See Revision1.
	Revision int `json:"revision,omitempty"`
	// OneShot: the run completes as soon as it has published what it was
	// given and nothing else is pending, with no idle wait (and no timer).
	// Pollers start an aggregate they have not signalled recently this
	// way, with its events in Pending; a running one still gets
	// Signal-With-Start. Runs with the field unset keep IdleTimeout.
	OneShot bool `json:"one_shot,omitempty"`
	// MaxBlockedRefs is the most event references the run keeps while it
	// is blocked. Events signalled beyond it are handed back to PostgreSQL
	// (HoldEventsActivity: their rows are pending again, out of the claim
	// for HoldInterval) and released when the block ends
	// (ReleaseHeldActivity), so a blocked busy aggregate neither grows its
	// state nor its continue-as-new input without bound. Zero: no bound,
	// what runs started before the field replay.
	MaxBlockedRefs int `json:"max_blocked_refs,omitempty"`
	// Held: events were handed back during the current block, so its end
	// releases them. Kept across continue-as-new.
	Held bool `json:"held,omitempty"`
	// Blocked carries a quarantine across continue-as-new.
	Blocked *Blocked `json:"blocked,omitempty"`
	// Repairs carries the results of recent repair requests across
	// continue-as-new, so a repeated request id stays a no-op.
	Repairs []RepairResult `json:"repairs,omitempty"`
	// Epoch is the ownership epoch the publish-first lane handed the
	// aggregate to this run under (Revision3); 0: the workflow lane, where
	// the run is the aggregate's only publisher without one. Kept across
	// continue-as-new.
	Epoch int64 `json:"epoch,omitempty"`
	// Handoff: a relay of the publish-first lane hands the aggregate over
	// because publishing Pending[0] failed (or it needs the workflow). The
	// run publishes it on the regular path (PublishEventActivity, retries
	// visible in the Temporal UI) rather than trying the fast path first.
	Handoff bool `json:"handoff,omitempty"`
	// HandoffCause is why (the error class of the failed publish, or
	// NeedsWorkflow), for the UI and the logs.
	HandoffCause string `json:"handoff_cause,omitempty"`
}

// PublishInput is the publish activity's input.
type PublishInput struct {
	EventID       string `json:"event_id"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	Version       int64  `json:"version"`
	// Epoch fences the mark (Revision3); 0: unfenced, the workflow lane.
	Epoch int64 `json:"epoch,omitempty"`
}

// PublishResult is the publish activity's result.
type PublishResult struct {
	// AlreadyPublished: the row was marked published by an earlier attempt,
	// so nothing was sent this time.
	AlreadyPublished bool `json:"already_published,omitempty"`
	// Effects to start for the event, resolved by the worker's routes
	// (also when AlreadyPublished: starting them again is a no-op).
	Effects []EffectStart `json:"effects,omitempty"`
}

// PublishBatchInput is PublishBatchActivity's input: consecutive versions
// of one aggregate, ascending, starting right after the delivered one.
type PublishBatchInput struct {
	AggregateType string     `json:"aggregate_type"`
	AggregateID   string     `json:"aggregate_id"`
	Events        []EventRef `json:"events"`
	// LoadCursor: the run does not know its delivered version yet. The
	// activity reads it first, drops the events at or below it, publishes
	// the consecutive run that follows it, and returns it in Cursor.
	// Events are then ascending but need not start right after the cursor.
	LoadCursor bool `json:"load_cursor,omitempty"`
	// Settings: the run asks for the worker's workflow settings
	// (Revision2). The activity returns them in the result and publishes
	// at most their PublishBatchSize events (none when the fast path is
	// off), whatever the input holds.
	Settings bool `json:"settings,omitempty"`
	// Epoch fences the marks (Revision3); 0: unfenced, the workflow lane.
	Epoch int64 `json:"epoch,omitempty"`
}

// PublishBatchResult is PublishBatchActivity's result.
type PublishBatchResult struct {
	// Published is how many leading events of the input are published and
	// marked (including ones an earlier attempt had published); with
	// LoadCursor, leading events of those above Cursor.
	Published int `json:"published"`
	// Cursor is the delivered version read before publishing (LoadCursor
	// only).
	Cursor int64 `json:"cursor,omitempty"`
	// Effects to start, for published events that have any.
	Effects []EventEffects `json:"effects,omitempty"`
	// Stopped says why the batch ended before its last event; the workflow
	// publishes that event on the regular path, with retries.
	Stopped string `json:"stopped,omitempty"`
	// Settings are the worker's workflow settings (PublishBatchInput.Settings
	// only).
	Settings *Settings `json:"settings,omitempty"`
}

// EventEffects are the effects to start for one published event.
type EventEffects struct {
	Version int64         `json:"version"`
	Effects []EffectStart `json:"effects"`
}

// CursorInput is LoadCursorActivity's input.
type CursorInput struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	// Settings: the run asks for the worker's workflow settings too
	// (Revision2).
	Settings bool `json:"settings,omitempty"`
}

// CursorResult is LoadCursorActivity's result.
type CursorResult struct {
	// Delivered is the highest version delivered in order (0: none).
	Delivered int64 `json:"delivered"`
	// Settings are the worker's workflow settings (CursorInput.Settings
	// only).
	Settings *Settings `json:"settings,omitempty"`
}

// State is what StateQuery returns.
type State struct {
	Delivered int64 `json:"delivered"`
	// Pending are versions received but not yet published, ascending. A
	// first entry above Delivered+1 means the workflow waits for a missing
	// version.
	Pending []int64 `json:"pending"`
	// Duplicates counts signalled events dropped as already seen.
	Duplicates int `json:"duplicates"`
	// Publishing is the version being published now, or 0.
	Publishing int64 `json:"publishing"`
	// Blocked is the quarantined event the aggregate waits at, or nil.
	Blocked *Blocked `json:"blocked,omitempty"`
	// Rejected lists repair signals that failed validation (newest last,
	// at most 20), with the reason.
	Rejected []string `json:"rejected,omitempty"`
	// Effects counts the effect workflows this run started for published
	// events.
	Effects EffectCounts `json:"effects"`
	// Epoch is the ownership epoch the run publishes under (the
	// publish-first lane); 0 in the workflow lane.
	Epoch int64 `json:"epoch,omitempty"`
	// Unread counts the EventsSignal signals the run has received and not
	// taken yet (a blocked run without MaxBlockedRefs leaves them in its
	// channel). Zero says the run took every event signalled to it: each
	// is in Pending, being published, delivered, quarantined or handed
	// back (held), and a dispatched row it holds none of was signalled to
	// a run that ended; the reconciler relies on that. Nil: a worker from
	// before the field answered.
	Unread *int `json:"unread,omitempty"`
}

// ReleaseInput is ReleaseAggregateActivity's input.
type ReleaseInput struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	Epoch         int64  `json:"epoch"`
}

// ReleaseResult is ReleaseAggregateActivity's result.
type ReleaseResult struct {
	// Released: the aggregate is not the run's any more: the run gave it
	// back (or found it given back by an earlier attempt, or taken back),
	// and publishes nothing more of it.
	Released bool `json:"released,omitempty"`
	// Busy: relays handed the run versions it has not delivered yet
	// (HandedVersion > Delivered): it keeps the aggregate and waits for
	// them.
	Busy bool `json:"busy,omitempty"`
	// Delivered and HandedVersion are what PostgreSQL said.
	Delivered     int64 `json:"delivered,omitempty"`
	HandedVersion int64 `json:"handed_version,omitempty"`
	// Owner is who owned the aggregate when the run did not find it as
	// its own ("" when the run released it).
	Owner string `json:"owner,omitempty"`
}

// Names of the repair and replay contract. Wire contract: never rename.
const (
	// RepairUpdate is a workflow update taking a RepairRequest and answering
	// with a RepairResult, validated before it is accepted.
	RepairUpdate = "ferry.repair"
	// RepairSignal takes the same RepairRequest, for `temporal workflow
	// signal` and batch signals; a request that fails validation is dropped
	// and listed in State.Rejected.
	RepairSignal = "ferry.repair"
	// ReplayWorkflowName re-publishes delivered events (ReplayInput).
	ReplayWorkflowName = "ferry.Replay"

	// QuarantineActivity marks an event quarantined in PostgreSQL.
	QuarantineActivity = "ferry.QuarantineEvent"
	// RepairActivity writes the audit row of a repair and applies it to the
	// outbox row (skip, patch).
	RepairActivity = "ferry.ApplyRepair"
	// ReplayActivity re-publishes one delivered event, audited.
	ReplayActivity = "ferry.ReplayEvent"
	// HoldEventsActivity hands events a blocked workflow does not keep
	// back to PostgreSQL (HoldInput).
	HoldEventsActivity = "ferry.HoldEvents"
	// ReleaseHeldActivity makes an aggregate's held events claimable again
	// once its block ended (ReleaseHeldInput).
	ReleaseHeldActivity = "ferry.ReleaseHeld"
)

// HeldPrefix starts the last_error of a row a blocked workflow handed back
// (HoldEventsActivity); pollers do not mark such a row dispatched. The
// statements that write and find it are relaydb's (relaydb.HeldPrefix).
const HeldPrefix = relaydb.HeldPrefix

// HoldInterval is how long a held row stays out of the claim when nothing
// releases it (its workflow was terminated while blocked): it is then
// claimed and signalled again.
const HoldInterval = time.Hour

// HoldInput is HoldEventsActivity's input.
type HoldInput struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	// BlockedEventID is what the aggregate waits at, for last_error.
	BlockedEventID string   `json:"blocked_event_id"`
	EventIDs       []string `json:"event_ids"`
	// Epoch fences the hand-back (Revision3); 0: unfenced.
	Epoch int64 `json:"epoch,omitempty"`
}

// ReleaseHeldInput is ReleaseHeldActivity's input.
type ReleaseHeldInput struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
}

// Search attributes Ferry sets on an aggregate workflow while it is
// blocked. Filter the Temporal UI's workflow list by `FerryBlocked = true`
// for the dead-letter view.
const (
	SABlocked          = "FerryBlocked"          // Bool
	SABlockedEventID   = "FerryBlockedEventId"   // Keyword
	SABlockedEventType = "FerryBlockedEventType" // Keyword
	SAErrorClass       = "FerryErrorClass"       // Keyword
	SABlockedSince     = "FerryBlockedSince"     // Datetime
)

// Repair actions.
const (
	ActionRetry = "retry"
	ActionSkip  = "skip"
	ActionPatch = "patch"
)

// Poison policies of an EventPolicy.
const (
	// OnPoisonBlock holds the aggregate until an operator repairs the event
	// (the default: later events of the aggregate may depend on it).
	OnPoisonBlock = "block"
	// OnPoisonSkip marks the event skipped, audits it and carries on.
	OnPoisonSkip = "skip"
)

// DefaultMaxAttempts is how often an event is tried before it is
// quarantined: with 1s, 2s, 4s… capped at 30s, ten attempts span about
// three minutes.
const DefaultMaxAttempts = 10

// EventPolicy says how an event type is retried and what happens when its
// retries run out.
type EventPolicy struct {
	// MaxAttempts of the publish activity; 0 means DefaultMaxAttempts.
	MaxAttempts int32 `json:"max_attempts,omitempty"`
	// OnPoison is OnPoisonBlock (default, "") or OnPoisonSkip.
	OnPoison string `json:"on_poison,omitempty"`
}

// Blocked describes the event an aggregate is held at.
type Blocked struct {
	EventID    string    `json:"event_id"`
	Version    int64     `json:"version"`
	EventType  string    `json:"event_type"`
	ErrorClass string    `json:"error_class"`
	Error      string    `json:"error"`
	Since      time.Time `json:"since"`
}

// RepairRequest asks a blocked aggregate workflow to retry, skip or patch
// its blocked event.
type RepairRequest struct {
	// RequestID makes the request idempotent: the same id is applied once.
	RequestID string `json:"request_id"`
	Action    string `json:"action"`
	// EventID must be the blocked event's id. Empty, the request means
	// "whatever is blocked here" and needs ExpectErrorClass: what one batch
	// signal or update by query sends to many aggregates, each blocked at
	// its own event (audited as "<request id>/<event id>").
	EventID string `json:"event_id"`
	// ExpectErrorClass, when set, must be the blocked event's error class
	// (FerryErrorClass), or the request is rejected.
	ExpectErrorClass string `json:"expect_error_class,omitempty"`
	Reason           string `json:"reason"`
	Actor            string `json:"actor"`
	// Payload replaces the event's payload (patch only; optional if
	// SchemaVersion is set).
	Payload json.RawMessage `json:"payload,omitempty"`
	// SchemaVersion replaces the event's schema version (patch only).
	SchemaVersion int `json:"schema_version,omitempty"`
}

// byClass: the request uses the fields of repairs by error class.
func (r RepairRequest) byClass() bool { return r.EventID == "" || r.ExpectErrorClass != "" }

// MemoRepairRejected is the memo key under which an aggregate workflow
// keeps the last repair signal it rejected, with the reason.
const MemoRepairRejected = "ferry.repair_rejected"

// RepairResult answers a RepairRequest.
type RepairResult struct {
	RequestID string `json:"request_id"`
	Action    string `json:"action"`
	EventID   string `json:"event_id"`
	Version   int64  `json:"version"`
	// AuditID is the ferry_repairs row written for the request.
	AuditID int64 `json:"audit_id"`
	// Duplicate: the request id was applied before; nothing was done again.
	Duplicate bool `json:"duplicate,omitempty"`
}

// RepairInput is RepairActivity's input.
type RepairInput struct {
	Request       RepairRequest `json:"request"`
	AggregateType string        `json:"aggregate_type"`
	AggregateID   string        `json:"aggregate_id"`
	Version       int64         `json:"version"`
	// Epoch fences the repair's change to the row (Revision3); 0:
	// unfenced.
	Epoch int64 `json:"epoch,omitempty"`
}

// QuarantineInput is QuarantineActivity's input.
type QuarantineInput struct {
	EventID    string `json:"event_id"`
	EventType  string `json:"event_type"`
	ErrorClass string `json:"error_class"`
	Error      string `json:"error"`
	// Epoch fences the quarantine (Revision3); 0: unfenced.
	Epoch int64 `json:"epoch,omitempty"`
	// AggregateType and AggregateID name the owner row the epoch is
	// checked against (Epoch only).
	AggregateType string `json:"aggregate_type,omitempty"`
	AggregateID   string `json:"aggregate_id,omitempty"`
}

// ReplayInput starts a ReplayWorkflowName workflow.
type ReplayInput struct {
	RequestID string   `json:"request_id"`
	EventIDs  []string `json:"event_ids"`
	Reason    string   `json:"reason"`
	Actor     string   `json:"actor"`
}

// ReplayEventInput is ReplayActivity's input.
type ReplayEventInput struct {
	RequestID string `json:"request_id"` // per event: <replay request id>/<event id>
	EventID   string `json:"event_id"`
	Reason    string `json:"reason"`
	Actor     string `json:"actor"`
}

// ReplayResult is the Replay workflow's result.
type ReplayResult struct {
	Replayed []string `json:"replayed"`
}
