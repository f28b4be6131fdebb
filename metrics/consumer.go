package metrics

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Consumer are the metrics of consumers (package consumer): outcomes,
// dead-lettered messages by cause, commit-to-applied lag, and the depth of
// each consumer's queues read from the broker at scrape time. A nil
// *Consumer counts nothing. One *Consumer serves every consumer of a
// process; the consumer label tells them apart.
type Consumer struct {
	outcomes     *prometheus.CounterVec
	deadLettered *prometheus.CounterVec
	lag          *prometheus.HistogramVec
	depth        *queueCollector
	inboxCleaned *prometheus.CounterVec
	inboxRound   *prometheus.GaugeVec

	mu          sync.Mutex
	cleanerSeen map[string]bool // consumers whose cleaner has a round or a start on record
}

// NewConsumer creates the consumer metrics and registers them on reg.
func NewConsumer(reg prometheus.Registerer) (*Consumer, error) {
	c := &Consumer{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_consumer_events_total",
			Help: "Deliveries taken to an outcome, by consumer and outcome (applied, duplicate, stale, delayed, retried, parked, quarantined).",
		}, []string{"consumer", "outcome"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_consumer_dead_lettered_total",
			Help: "Messages the consumer moved to <queue>.dlq, by consumer and cause (invalid-event, schema-version, gap-timeout, handler-failed).",
		}, []string{"consumer", "cause"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ferry_consumer_lag_seconds",
			Help: "From the event's commit (the message's timestamp, whole seconds), or its due time when it was delayed (ferry-due-at), to its effect committed by the consumer, by consumer.",
			// The AMQP timestamp has whole seconds: the first bucket
			// that means anything is 1s.
			Buckets: []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
		}, []string{"consumer"}),
		depth: &queueCollector{
			desc:    prometheus.NewDesc("ferry_consumer_queue_messages", "Messages ready in a consumer's queues (the main queue and <queue>.dlq), read from the broker at scrape time.", []string{"consumer", "queue"}, nil),
			errDesc: prometheus.NewDesc("ferry_consumer_queue_scrape_error", "1 when a consumer's queue depths could not be read for this scrape (not connected).", []string{"consumer"}, nil),
			watched: map[string]QueueDepths{},
		},
	}
	c.cleanerSeen = map[string]bool{}
	c.inboxCleaned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_inbox_cleaned_rows_total",
		Help: "Inbox rows past their retention deleted by the inbox cleaner, by consumer.",
	}, []string{"consumer"})
	c.inboxRound = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ferry_inbox_cleaned_timestamp_seconds",
		Help: "When this process's inbox cleaner last finished a round (Unix time), by consumer; a round another process's cleaner held counts too, and so does the cleaner's start until it finishes one.",
	}, []string{"consumer"})
	if err := register(reg, c.outcomes, c.deadLettered, c.lag, c.depth, c.inboxCleaned, c.inboxRound); err != nil {
		return nil, err
	}
	return c, nil
}

// Outcome counts one delivery's outcome.
func (c *Consumer) Outcome(consumer, outcome string) {
	if c != nil {
		c.outcomes.WithLabelValues(consumer, outcome).Inc()
	}
}

// DeadLettered counts one message moved to the dead-letter queue.
func (c *Consumer) DeadLettered(consumer, cause string) {
	if c != nil {
		c.deadLettered.WithLabelValues(consumer, cause).Inc()
	}
}

// InboxCleaned counts rows the inbox cleaner deleted.
func (c *Consumer) InboxCleaned(consumer string, rows int) {
	if c != nil {
		c.inboxCleaned.WithLabelValues(consumer).Add(float64(rows))
	}
}

// InboxCleanerStarted records a cleaner's start as its last finished round
// when none is on record yet, so a cleaner that never finishes one still
// ages on ferry_inbox_cleaned_timestamp_seconds.
func (c *Consumer) InboxCleanerStarted(consumer string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cleanerSeen[consumer] {
		c.cleanerSeen[consumer] = true
		c.inboxCleaned.WithLabelValues(consumer).Add(0)
		c.inboxRound.WithLabelValues(consumer).SetToCurrentTime()
	}
}

// InboxRoundDone records that a round of the inbox cleaner finished without
// error (whether it deleted rows, found none, or another cleaner held it).
func (c *Consumer) InboxRoundDone(consumer string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.cleanerSeen[consumer] = true
	c.mu.Unlock()
	c.inboxCleaned.WithLabelValues(consumer).Add(0)
	c.inboxRound.WithLabelValues(consumer).SetToCurrentTime()
}

// Applied records the lag of an event deliverable since since (its commit,
// or its due time when delayed) whose effect the consumer has just
// committed; a zero since (a message without a timestamp) records nothing.
func (c *Consumer) Applied(consumer string, since time.Time) {
	if c != nil && !since.IsZero() {
		c.lag.WithLabelValues(consumer).Observe(max(time.Since(since).Seconds(), 0))
	}
}

// QueueDepths reads the messages ready in a consumer's queues, by queue
// name.
// It is an alias, so that *Consumer satisfies consumer.Metrics.
type QueueDepths = func(ctx context.Context) (map[string]int, error)

// WatchQueues reads depths at every scrape, labelled with consumer; a
// second call for the same consumer replaces the first.
func (c *Consumer) WatchQueues(consumer string, depths QueueDepths) {
	if c == nil {
		return
	}
	// The lag histogram of a consumer starts empty rather than at its first
	// observation, which rate() would miss.
	c.lag.WithLabelValues(consumer)
	c.depth.mu.Lock()
	defer c.depth.mu.Unlock()
	c.depth.watched[consumer] = depths
}

// Unwatch stops reading a consumer's queues (it stopped).
func (c *Consumer) Unwatch(consumer string) {
	if c == nil {
		return
	}
	c.depth.mu.Lock()
	defer c.depth.mu.Unlock()
	delete(c.depth.watched, consumer)
}

type queueCollector struct {
	desc, errDesc *prometheus.Desc

	mu      sync.Mutex
	watched map[string]QueueDepths
}

func (q *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.desc
	ch <- q.errDesc
}

func (q *queueCollector) Collect(ch chan<- prometheus.Metric) {
	q.mu.Lock()
	watched := maps.Clone(q.watched)
	q.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for consumer, depths := range watched {
		got, err := depths(ctx)
		failed := 0.0
		if err != nil {
			failed = 1
		}
		for queue, n := range got {
			ch <- prometheus.MustNewConstMetric(q.desc, prometheus.GaugeValue, float64(n), consumer, queue)
		}
		ch <- prometheus.MustNewConstMetric(q.errDesc, prometheus.GaugeValue, failed, consumer)
	}
}
