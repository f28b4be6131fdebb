package consumer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/consumer"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/metrics"
)

// value reads the one series of name in reg whose labels include labels.
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	s := ferrytest.Series(t, reg, name, labels)
	require.Len(t, s, 1, "%s%v", name, labels)
	return s[0].Value
}

// Outcomes, dead-lettered causes, commit-to-applied lag and the queues'
// depth reach the registry from a real consumer run.
func TestMetricsCountOutcomesLagAndDepth(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.NewConsumer(reg)
	require.NoError(t, err)
	cfg := e.config(record)
	cfg.Metrics = m
	c, err := consumer.New(cfg)
	require.NoError(t, err)
	require.NoError(t, c.Declare(t.Context()))

	// Committed three seconds ago, as the relay stamps it (whole seconds).
	committed := time.Now().Add(-3 * time.Second)
	publish := func(mm msg) {
		t.Helper()
		dc, err := e.ch.PublishWithDeferredConfirm(e.broker.Exchange, "order."+mm.eventType, true, false, amqp.Publishing{
			Headers: amqp.Table{
				broker.HeaderAggregateType:    "order",
				broker.HeaderAggregateID:      mm.aggregateID,
				broker.HeaderAggregateVersion: mm.version,
				broker.HeaderSchemaVersion:    mm.schema,
			},
			MessageId: mm.id, Type: mm.eventType, Body: []byte(mm.body), Timestamp: committed, DeliveryMode: amqp.Persistent,
		})
		require.NoError(t, err)
		require.True(t, dc.Wait())
	}
	future := order("from-the-future", "3", 1)
	future.schema = 9
	for _, mm := range []msg{order("a", "1", 1), order("a", "1", 1), order("b", "2", 1), future} {
		publish(mm)
	}

	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(c.Stop)
	e.waitEffectsOfAggregates("a@v1", "b@v1")
	require.Eventually(t, func() bool {
		s := c.Stats()
		return s.Duplicates == 1 && s.Quarantined == 1
	}, 15*time.Second, 10*time.Millisecond)

	who := func(extra map[string]string) map[string]string {
		l := map[string]string{"consumer": "inventory"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	require.Equal(t, 2.0, value(t, reg, "ferry_consumer_events_total", who(map[string]string{"outcome": "applied"})))
	require.Equal(t, 1.0, value(t, reg, "ferry_consumer_events_total", who(map[string]string{"outcome": "duplicate"})))
	require.Equal(t, 1.0, value(t, reg, "ferry_consumer_events_total", who(map[string]string{"outcome": "quarantined"})))
	require.Equal(t, 1.0, value(t, reg, "ferry_consumer_dead_lettered_total", who(map[string]string{"cause": consumer.CauseSchema})))

	lag := ferrytest.Series(t, reg, "ferry_consumer_lag_seconds", who(nil))
	require.Len(t, lag, 1)
	require.Equal(t, uint64(2), lag[0].Count, "one lag sample per applied event, none for the duplicate")
	require.GreaterOrEqual(t, lag[0].Sum, 6.0, "each at least the 3s since the commit")
	require.Zero(t, lag[0].Buckets[2], "no event applied within 2s of a commit 3s ago")

	// Depth, read from the broker at scrape time: the quarantined message
	// waits in the dead-letter queue, the main queue is drained.
	require.Equal(t, 1.0, value(t, reg, "ferry_consumer_queue_messages", who(map[string]string{"queue": e.queue + ".dlq"})))
	require.Equal(t, 0.0, value(t, reg, "ferry_consumer_queue_messages", who(map[string]string{"queue": e.queue})))
	require.Equal(t, 0.0, value(t, reg, "ferry_consumer_queue_scrape_error", who(nil)))

	c.Stop()
	require.Empty(t, ferrytest.Series(t, reg, "ferry_consumer_queue_messages", nil), "a stopped consumer's queues are not read")
}

// A nil *metrics.Consumer counts nothing and does not panic.
func TestNilConsumerMetrics(t *testing.T) {
	t.Parallel()
	var m *metrics.Consumer
	m.Outcome("x", "applied")
	m.DeadLettered("x", consumer.CauseSchema)
	m.Applied("x", time.Now())
	m.WatchQueues("x", nil)
	m.Unwatch("x")
}

// consumer.Module counts into the *metrics.Consumer in the graph (the one
// Ferry's metrics module serves) when Config.Metrics is nil.
func TestModuleUsesTheGraphsMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.NewConsumer(reg)
	require.NoError(t, err)
	var c *consumer.Consumer
	app := fx.New(
		fx.NopLogger,
		fx.Supply(e.config(record)),
		fx.Provide(func() *metrics.Consumer { return m }),
		consumer.Module,
		fx.Populate(&c),
	)
	require.NoError(t, app.Err())
	require.NoError(t, app.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, app.Stop(context.Background())) })
	require.Eventually(t, func() bool { return c.Stats().Consuming }, 10*time.Second, 5*time.Millisecond)

	e.publish(order("a", "1", 1))
	e.waitEffects("a@v1")
	require.Eventually(t, func() bool {
		s := ferrytest.Series(t, reg, "ferry_consumer_events_total", map[string]string{"consumer": "inventory", "outcome": "applied"})
		return len(s) == 1 && s[0].Value == 1
	}, 10*time.Second, 10*time.Millisecond)
}

// A delayed event lags from when it became due (the relay's ferry-due-at
// header), not from its commit: a delay the producer asked for is no lag.
// The handler sees the due time in inbox.Event.DueAt; a due header that is
// no timestamp quarantines the message, naming the header.
func TestDelayedEventsLagFromTheirDueTime(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.NewConsumer(reg)
	require.NoError(t, err)
	var (
		mu  sync.Mutex
		due = map[string]time.Time{}
	)
	cfg := e.config(func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		mu.Lock()
		due[ev.ID] = ev.DueAt
		mu.Unlock()
		return record(ctx, tx, ev)
	})
	cfg.Metrics = m
	var res results
	cfg.OnResult = res.add
	e.start(cfg)

	// Committed a minute ago with a delay that ran out a second ago, as the
	// relay stamps both (whole seconds).
	committed := time.Now().Add(-time.Minute).Truncate(time.Second)
	dueAt := time.Now().Add(-time.Second).Truncate(time.Second)
	delayed := order("delayed", "1", 1)
	delayed.timestamp, delayed.extra = committed, amqp.Table{broker.HeaderDueAt: dueAt}
	bad := order("bad-due", "2", 1)
	bad.timestamp, bad.extra = committed, amqp.Table{broker.HeaderDueAt: "tomorrow"}
	e.publish(delayed)
	e.publish(bad)
	e.waitEffects("delayed@v1")
	require.Eventually(t, func() bool { return slices.Contains(res.outcomes(), "bad-due@v1:quarantined") }, 15*time.Second, 10*time.Millisecond)

	lag := ferrytest.Series(t, reg, "ferry_consumer_lag_seconds", map[string]string{"consumer": "inventory"})
	require.Len(t, lag, 1)
	require.Equal(t, uint64(1), lag[0].Count)
	require.Less(t, lag[0].Sum, 30.0, "lag from the due time (~1s ago), not the commit a minute ago")
	mu.Lock()
	require.True(t, due["delayed"].Equal(dueAt), "the handler saw due at %s, want %s", due["delayed"], dueAt)
	mu.Unlock()
	res.mu.Lock()
	defer res.mu.Unlock()
	for _, r := range res.all {
		if r.Event.ID == "bad-due" {
			require.Contains(t, r.Reason, "ferry-due-at is a string, not a timestamp")
		}
	}
}
