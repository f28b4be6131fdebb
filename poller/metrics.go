package poller

import "time"

// Metrics is what a poller counts (package metrics' *Relay is the
// Prometheus one).
type Metrics interface {
	// Batch records one round: rows claimed, aggregates whose dispatch
	// failed (their rows stay pending), and how long the round took.
	Batch(claimed, failedAggregates int, took time.Duration)
	// Quarantined counts one event quarantined because Temporal refused
	// its start or signal as invalid (error class ErrClassTemporalRefused).
	Quarantined(eventType, errorClass string)
	// Dispatched records how one aggregate's events went to Temporal
	// (DispatchStart, DispatchStartFallback, DispatchSignal,
	// DispatchHandoff, DispatchHandoffSignal).
	Dispatched(how string)
	// Published counts one event the publish-first lane published
	// directly; dueAt is when it became deliverable (latency counts from
	// it).
	Published(aggregateType string, dueAt time.Time)
	// PublishFailed counts one failed direct publish by error class.
	PublishFailed(errorClass string)
	// LanePublished counts n events published by one path (metrics.PathDirect).
	LanePublished(path string, n int)
	// Handoff counts one aggregate changing hands
	// (metrics.ToWorkflow, metrics.ToLane) and why.
	Handoff(direction, cause string)
}

// How a poller handed an aggregate's events to Temporal (Metrics.Dispatched;
// label "how" of ferry_relay_dispatches_total).
const (
	// DispatchStart: a one-shot run started with the events in its input.
	DispatchStart = "start"
	// DispatchStartFallback: a one-shot start found a run open and
	// signalled it instead.
	DispatchStartFallback = "start_fallback"
	// DispatchSignal: Signal-With-Start of an aggregate dispatched recently
	// (in the publish-first lane: of an aggregate its workflow owns).
	DispatchSignal = "signal"
	// DispatchHandoff: the publish-first lane handed an aggregate to a new
	// run, the events in its input.
	DispatchHandoff = "handoff"
	// DispatchHandoffSignal: a handoff found a run open and signalled it
	// under the new epoch.
	DispatchHandoffSignal = "handoff_signal"
)

// noMetrics counts nothing: Config.Metrics' default.
type noMetrics struct{}

func (noMetrics) Batch(int, int, time.Duration) {}
func (noMetrics) Quarantined(string, string)    {}
func (noMetrics) Dispatched(string)             {}
func (noMetrics) Published(string, time.Time)   {}
func (noMetrics) PublishFailed(string)          {}
func (noMetrics) LanePublished(string, int)     {}
func (noMetrics) Handoff(string, string)        {}
