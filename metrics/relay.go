package metrics

import (
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
	dispatches     *prometheus.CounterVec
	deliveries     *prometheus.CounterVec
	lanePublished  *prometheus.CounterVec
	handoffs       *prometheus.CounterVec
	// quarantined is Metrics' ferry_events_quarantined_total, when the
	// relay metrics are part of a Metrics; nil otherwise.
	quarantined *prometheus.CounterVec
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
			Help: "Events delivered (confirmed by RabbitMQ unless they skip it, taken by every workflow destination) and marked published, by aggregate type.",
		}, []string{"aggregate_type"}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_publish_failures_total",
			Help: "Failed publish attempts, by error class (each is retried or quarantines the event).",
		}, []string{"error_class"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_commit_to_published_seconds",
			Help:    "From the outbox row's created_at (the producer's transaction), or its deliver_after when later (a delayed event), to the broker's confirm.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		dispatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_relay_dispatches_total",
			Help: "Aggregates handed to Temporal by pollers, by how: start (a one-shot run), start_fallback (a run was open: signalled), signal (signal-with-start).",
		}, []string{"how"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_destination_deliveries_total",
			Help: "Deliveries to workflow destinations, by destination and outcome: delivered (started or signalled), existed (a start found its workflow there), repeated (a signal its closed workflow had taken), failed (retried, or quarantines the event).",
		}, []string{"destination", "outcome"}),
	}
	r.lanePublished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_lane_published_total",
		Help: "Events published, by path: direct (the publish-first lane's relay published it itself) or workflow (an aggregate workflow's activity did).",
	}, []string{"path"})
	r.handoffs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_lane_handoffs_total",
		Help: "Aggregates changing hands in the publish-first lane: direction to_workflow (a relay handed it to its workflow; cause: the failed publish's error class, NeedsWorkflow, EventMissing, Repair) or to_lane (released: its run published what it held; reconciled: the reconciler took it back from a run that ended).",
	}, []string{"direction", "cause"})
	// Known label values start at 0, so that rate() and increase() see the
	// first one (a series born above 0 has no earlier sample).
	for _, path := range []string{PathDirect, PathWorkflow} {
		r.lanePublished.WithLabelValues(path)
	}
	if err := register(reg, r.claimed, r.signalFailures, r.batchDuration, r.published, r.publishErrors, r.latency, r.dispatches, r.deliveries,
		r.lanePublished, r.handoffs); err != nil {
		return nil, err
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

// Published records one confirmed event that became deliverable at dueAt
// (its commit, or its deliver_after when later).
func (r *Relay) Published(aggregateType string, dueAt time.Time) {
	if r == nil {
		return
	}
	r.published.WithLabelValues(aggregateType).Inc()
	r.latency.Observe(time.Since(dueAt).Seconds())
}

// KnownErrorClasses starts ferry_publish_failures_total at 0 for each error
// class (the publish activities' error types), so that the first failure of
// a class counts in rate() and increase().
func (r *Relay) KnownErrorClasses(classes ...string) {
	if r != nil {
		for _, c := range classes {
			r.publishErrors.WithLabelValues(c)
		}
	}
}

// PublishFailed records one failed publish attempt.
func (r *Relay) PublishFailed(errorClass string) {
	if r != nil {
		r.publishErrors.WithLabelValues(errorClass).Inc()
	}
}

// Quarantined counts one event a poller quarantined (Temporal refused its
// start or signal as invalid) in ferry_events_quarantined_total.
func (r *Relay) Quarantined(eventType, errorClass string) {
	if r != nil && r.quarantined != nil {
		r.quarantined.WithLabelValues(eventType, errorClass).Inc()
	}
}

// Dispatched records how one aggregate's events went to Temporal (the
// poller's DispatchStart, DispatchStartFallback, DispatchSignal).
func (r *Relay) Dispatched(how string) {
	if r != nil {
		r.dispatches.WithLabelValues(how).Inc()
	}
}

// Label values of ferry_lane_published_total (path) and
// ferry_lane_handoffs_total (direction, and the causes that are not a
// failed publish's error class).
const (
	PathDirect      = "direct"
	PathWorkflow    = "workflow"
	ToWorkflow      = "to_workflow"
	ToLane          = "to_lane"
	CauseReleased   = "released"
	CauseReconciled = "reconciled"
	CauseRepair     = "Repair"
)

// LanePublished counts n events published by one path (PathDirect,
// PathWorkflow).
func (r *Relay) LanePublished(path string, n int) {
	if r != nil {
		r.lanePublished.WithLabelValues(path).Add(float64(n))
	}
}

// Handoff counts one aggregate changing hands in the publish-first lane.
func (r *Relay) Handoff(direction, cause string) {
	if r != nil {
		r.handoffs.WithLabelValues(direction, cause).Inc()
	}
}

// Delivered records one delivery to a workflow destination (outcome
// "delivered", "existed" or "failed").
func (r *Relay) Delivered(destination, outcome string) {
	if r != nil {
		r.deliveries.WithLabelValues(destination, outcome).Inc()
	}
}
