package consumer

import (
	"context"
	"time"
)

// Metrics is what a consumer counts (package metrics' *Consumer is the
// Prometheus one). consumer names the consumer (its inbox's name) in every
// call, so one Metrics serves every consumer of a process.
type Metrics interface {
	// Outcome counts one delivery taken to an outcome (Outcome values).
	Outcome(consumer, outcome string)
	// DeadLettered counts one message moved to <queue>.dlq, by cause.
	DeadLettered(consumer, cause string)
	// Applied records the lag since the event became deliverable (its
	// commit, the message's timestamp, or its due time when it was delayed;
	// zero when the message has no timestamp) to its effect committed.
	Applied(consumer string, since time.Time)
	// WatchQueues reads the depths of the consumer's queues, by queue name,
	// whenever the metrics are read, until Unwatch.
	WatchQueues(consumer string, depths func(ctx context.Context) (map[string]int, error))
	// Unwatch stops reading the consumer's queues (it stopped).
	Unwatch(consumer string)
}

// noMetrics counts nothing: Config.Metrics' default.
type noMetrics struct{}

func (noMetrics) Outcome(string, string)                                            {}
func (noMetrics) DeadLettered(string, string)                                       {}
func (noMetrics) Applied(string, time.Time)                                         {}
func (noMetrics) WatchQueues(string, func(context.Context) (map[string]int, error)) {}
func (noMetrics) Unwatch(string)                                                    {}
