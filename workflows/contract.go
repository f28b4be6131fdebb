package workflows

import "time"

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
)

// Defaults of AggregateInput's tunables.
const (
	// DefaultIdleTimeout: a workflow with nothing to do completes after this.
	DefaultIdleTimeout = time.Minute
	// DefaultMaxHistoryEvents: continue-as-new once history is this long,
	// far below Temporal's 10,240-event warning.
	DefaultMaxHistoryEvents = 4000
)

// WorkflowID is the aggregate workflow's ID: a pure function of the
// aggregate, so every poller signals the same workflow for it.
func WorkflowID(aggregateType, aggregateID string) string {
	return "ferry/" + aggregateType + "/" + aggregateID
}

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
	// IdleTimeout; zero means DefaultIdleTimeout.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// MaxHistoryEvents; zero means DefaultMaxHistoryEvents.
	MaxHistoryEvents int `json:"max_history_events,omitempty"`
}

// PublishInput is the publish activity's input.
type PublishInput struct {
	EventID       string `json:"event_id"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	Version       int64  `json:"version"`
}

// PublishResult is the publish activity's result.
type PublishResult struct {
	// AlreadyPublished: the row was marked published by an earlier attempt,
	// so nothing was sent this time.
	AlreadyPublished bool `json:"already_published,omitempty"`
}

// CursorInput is LoadCursorActivity's input.
type CursorInput struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
}

// CursorResult is LoadCursorActivity's result.
type CursorResult struct {
	// Delivered is the highest version delivered in order (0: none).
	Delivered int64 `json:"delivered"`
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
}
