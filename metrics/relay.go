package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Relay are the counters and histograms of the poller and the publish
// activity. A nil *Relay counts nothing.
type Relay struct {
	claimed        prometheus.Counter
	signalFailures prometheus.Counter
	batchDuration  prometheus.Histogram
	published      *prometheus.CounterVec
	publishErrors  *prometheus.CounterVec
	latency        prometheus.Histogram
}

// NewRelay creates the relay metrics and registers them on reg.
func NewRelay(reg prometheus.Registerer) (*Relay, error) {
	r := &Relay{
		claimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_relay_claimed_total",
			Help: "Outbox rows claimed by pollers (each claim is a dispatch attempt).",
		}),
		signalFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_relay_signal_failures_total",
			Help: "Aggregates whose signal-with-start failed; their rows stay pending and are retried.",
		}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_relay_batch_duration_seconds",
			Help:    "Time of one poller round: claim, signal every aggregate, mark.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_published_total",
			Help: "Events confirmed by RabbitMQ and marked published, by aggregate type.",
		}, []string{"aggregate_type"}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_publish_failures_total",
			Help: "Failed publish attempts, by error class (each is retried or quarantines the event).",
		}, []string{"error_class"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_commit_to_published_seconds",
			Help:    "From the outbox row's created_at (the producer's transaction) to the broker's confirm.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
	}
	for _, c := range []prometheus.Collector{r.claimed, r.signalFailures, r.batchDuration, r.published, r.publishErrors, r.latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metric: %w", err)
		}
	}
	return r, nil
}

// Batch records one poller round.
func (r *Relay) Batch(claimed, failedAggregates int, took time.Duration) {
	if r == nil {
		return
	}
	r.claimed.Add(float64(claimed))
	r.signalFailures.Add(float64(failedAggregates))
	r.batchDuration.Observe(took.Seconds())
}

// Published records one confirmed event committed at createdAt.
func (r *Relay) Published(aggregateType string, createdAt time.Time) {
	if r == nil {
		return
	}
	r.published.WithLabelValues(aggregateType).Inc()
	r.latency.Observe(time.Since(createdAt).Seconds())
}

// PublishFailed records one failed publish attempt.
func (r *Relay) PublishFailed(errorClass string) {
	if r != nil {
		r.publishErrors.WithLabelValues(errorClass).Inc()
	}
}
