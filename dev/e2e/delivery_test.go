package e2e

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
)

// 20 events over 5 aggregates, each committed with its business row, reach
// the queue: per-aggregate order, message id = event id, all marked published.
func TestDeliversCommittedEventsInOrderPerAggregate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{})

	ids := e.commitN(t, 20, 5)

	msgs := e.br.Collect(t, 20, 60*time.Second)
	require.Len(t, msgs, 20, "messages on the queue")
	l := newLedger()
	for _, m := range msgs {
		require.True(t, ids[m.MessageId], "message id %s is not one of the committed event ids", m.MessageId)
		require.Equal(t, "changed", m.Type)
		require.Equal(t, "application/json", m.ContentType)
		require.Equal(t, uint8(2), m.DeliveryMode, "persistent")
		require.Equal(t, e.aggType, m.Headers[broker.HeaderAggregateType])
		require.Equal(t, e.aggType+".changed", m.RoutingKey)
		l.add(parse(t, m))
	}
	require.Equal(t, 20, l.unique())
	require.Zero(t, l.duplicates)
	l.requireInOrder(t)
	for agg, versions := range l.order {
		require.Len(t, versions, 4, "aggregate %s", agg)
	}
	waitFor(t, 10*time.Second, "all 20 rows marked published", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published' AND published_at IS NOT NULL`) == 20
	})
	_, extra := e.br.Get(t, 300*time.Millisecond)
	require.False(t, extra, "no message beyond the 20")
}

// A transaction that writes a business row and its event and rolls back
// leaves nothing: no row, no message. A later committed event is the
// sentinel that proves the relay ran past the point.
func TestRolledBackEventIsNeverDelivered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{})
	ctx := context.Background()

	rolledBack, err := e.commit(ctx, "a", true)
	require.NoError(t, err)
	sentinel, err := e.commit(ctx, "a", false)
	require.NoError(t, err)

	msgs := e.br.Collect(t, 1, 60*time.Second)
	require.Len(t, msgs, 1)
	require.Equal(t, sentinel, msgs[0].MessageId)
	require.Equal(t, int64(1), msgs[0].Headers[broker.HeaderAggregateVersion], "the rollback gave version 1 back")
	_, extra := e.br.Get(t, time.Second)
	require.False(t, extra)
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1`, rolledBack))
	require.Zero(t, e.count(t, `SELECT count(*) FROM orders WHERE id = $1`, rolledBack))
}

// RabbitMQ unreachable while events are committed: nothing is lost, and
// everything arrives, in order, once it is back.
func TestBrokerOutageLosesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	proxy := servers.NewProxy(t, "127.0.0.1:5672")
	e.startFerry(t, ferryOpts{amqpURL: "amqp://guest:guest@" + proxy.Addr() + "/"})

	e.warmUp(t)

	proxy.Pause()
	ids := e.commitN(t, 15, 3)
	// The outage is real: publishes are attempted and fail, and the rows
	// say so while they wait.
	waitFor(t, 30*time.Second, "a failed publish recorded in last_error", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status <> 'published' AND last_error IS NOT NULL`) > 0
	})
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published' AND aggregate_id <> 'warm'`))
	proxy.Resume()

	msgs := e.br.Collect(t, 15, 90*time.Second)
	l := newLedger()
	for _, m := range msgs {
		require.True(t, ids[m.MessageId], "unexpected message %s", m.MessageId)
		l.add(parse(t, m))
	}
	require.Equal(t, 15, l.unique(), "every event committed during the outage arrives")
	l.requireInOrder(t)
	waitFor(t, 10*time.Second, "all rows published", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`) == 16
	})
}

// Two pollers race over a burst of 2,000 events on 200 aggregates: all are
// delivered, in order per aggregate, and with no crash there is no duplicate.
func TestTwoPollersBurst(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{pollers: 2})
	ctx := context.Background()

	const aggregates, perAggregate = 200, 10
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < aggregates*perAggregate; i += 8 {
				if _, err := e.commit(ctx, aggID(i%aggregates), false); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	l, stop := e.consume(t)
	start := time.Now()
	waitFor(t, 4*time.Minute, "2,000 unique deliveries", func() bool { return l.unique() == aggregates*perAggregate })
	took := time.Since(start)
	time.Sleep(500 * time.Millisecond) // let a late duplicate, if any, arrive
	stop()

	l.requireInOrder(t)
	require.Len(t, l.order, aggregates)
	require.Zero(t, l.duplicates, "no crash, so no duplicate")
	var claimers int
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT count(DISTINCT claimed_by) FROM outbox_events`).Scan(&claimers))
	t.Logf("2,000 events over 200 aggregates: drained in %s (%.0f events/s), rows claimed by %d poller(s)",
		took.Round(time.Millisecond), float64(aggregates*perAggregate)/took.Seconds(), claimers)
}

// Concurrent writers to one aggregate get unique, gap-free versions, and
// the events arrive in version order.
func TestConcurrentWritersOneAggregate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{})
	ctx := context.Background()

	var committed atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				_, err := e.commit(ctx, "hot", (w+i)%7 == 0)
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				if (w+i)%7 != 0 {
					committed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	n := int(committed.Load())

	var maxV, distinct int
	require.NoError(t, e.db.Pool.QueryRow(ctx,
		`SELECT max(aggregate_version), count(DISTINCT aggregate_version) FROM outbox_events WHERE aggregate_id = 'hot'`).Scan(&maxV, &distinct))
	require.Equal(t, n, maxV, "versions end at the number of committed transactions")
	require.Equal(t, n, distinct, "versions are unique and gap-free")

	msgs := e.br.Collect(t, n, 90*time.Second)
	require.Len(t, msgs, n)
	for i, m := range msgs {
		require.Equal(t, int64(i+1), m.Headers[broker.HeaderAggregateVersion], "delivery %d", i)
	}
}
