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
	// (DispatchStart, DispatchStartFallback, DispatchSignal).
	Dispatched(how string)
}

// How a poller handed an aggregate's events to Temporal (Metrics.Dispatched;
// label "how" of ferry_relay_dispatches_total).
const (
	// DispatchStart: a one-shot run started with the events in its input.
	DispatchStart = "start"
	// DispatchStartFallback: a one-shot start found a run open and
	// signalled it instead.
	DispatchStartFallback = "start_fallback"
	// DispatchSignal: Signal-With-Start of an aggregate dispatched recently.
	DispatchSignal = "signal"
)

// noMetrics counts nothing: Config.Metrics' default.
type noMetrics struct{}

func (noMetrics) Batch(int, int, time.Duration) {}
func (noMetrics) Quarantined(string, string)    {}
func (noMetrics) Dispatched(string)             {}
