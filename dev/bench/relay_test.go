package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/outbox"
)

// TestRelayDeliversEverythingInOrder runs the plain relay against the real
// PostgreSQL and RabbitMQ while the bench producer commits 300 events on
// 10 aggregates from 8 clients, and checks with the bench's own consumer
// and tally what the benchmark checks: all received, in order, marked.
func TestRelayDeliversEverythingInOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	db := ferrytest.NewDB(t, "")
	mq := ferrytest.NewBroker(t, "")
	_, err := db.Pool.Exec(ctx, sqlBenchTable)
	require.NoError(t, err)

	consumer, err := StartConsumer(mq.URL, mq.Exchange, ferrytest.Name("ferry.bench.test"))
	require.NoError(t, err)
	defer consumer.Close()
	tally := NewTally("bench_test")
	consumer.Count(tally)

	relay, err := NewRelay(RelayConfig{PostgresURL: db.URL, AMQPURL: mq.URL, Exchange: mq.Exchange, BatchSize: 50})
	require.NoError(t, err)
	relayCtx, stopRelay := context.WithCancel(ctx)
	ready := make(chan struct{})
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-relayDone:
		t.Fatalf("relay stopped before it was ready: %v", err)
	}

	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	p := &producer{pool: db.Pool, writer: w, clients: 8}
	commits := newCommits()
	// 100 transactions of 3 events over 10 aggregates: 8 clients write the
	// same aggregates at once, so versions are assigned in lock order, not
	// transaction start order, and a claim can see n+1 without n.
	s := shape{name: "test", aggregates: 10, eventsPerTx: 3, txs: 100, payloadBytes: 64}
	require.NoError(t, p.produce(ctx, s, "bench_test", commits))
	require.Equal(t, 300, commits.events())
	require.Equal(t, 100, commits.transactions)

	for tally.Received() < 300 {
		require.True(t, sleepCtx(ctx, 50*time.Millisecond), "only %d of 300 events arrived", tally.Received())
	}
	// The consumer can see a batch before the relay has marked it: stop
	// the relay only once every row is marked, or the last batch's marking
	// is cancelled (its rows stay pending, to be published again).
	for {
		var pending int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status <> 'published'`).Scan(&pending))
		if pending == 0 {
			break
		}
		require.True(t, sleepCtx(ctx, 50*time.Millisecond), "%d rows arrived but were never marked published", pending)
	}
	stopRelay()
	require.NoError(t, <-relayDone)
	require.Equal(t, 300, relay.Published)

	v, lat, _ := tally.Check(commits.at)
	require.Equal(t, Verdict{}, v, "all received once, in order, nothing else")
	require.Len(t, lat, 300)

	var notPublished, behind, bizRows int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status <> 'published'`).Scan(&notPublished))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_aggregates WHERE delivered_version <> last_version`).Scan(&behind))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM bench_orders`).Scan(&bizRows))
	require.Zero(t, notPublished)
	require.Zero(t, behind)
	require.Equal(t, 100, bizRows, "one business row per transaction")
}

func TestCommitRateWritesBusinessRowsAndEvents(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	_, err := db.Pool.Exec(t.Context(), sqlBenchTable)
	require.NoError(t, err)
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	p := &producer{pool: db.Pool, writer: w, clients: 2}

	rate, err := p.commitRate(t.Context(), 300*time.Millisecond, "bench_rate", extraOutbox)
	require.NoError(t, err)
	require.Positive(t, rate)
	var events, rows int
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events`).Scan(&events))
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM bench_orders`).Scan(&rows))
	require.Positive(t, events)
	require.Equal(t, rows, events, "one event per committed business row")

	_, err = p.commitRate(t.Context(), 300*time.Millisecond, "bench_rate", extraNone)
	require.NoError(t, err)
	var events2, rows2 int
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events`).Scan(&events2))
	require.Equal(t, events, events2, "the business-only variant writes no events")
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM bench_orders`).Scan(&rows2))
	require.Greater(t, rows2, rows)

	// The reference variant: two business rows per transaction, no event.
	_, err = p.commitRate(t.Context(), 300*time.Millisecond, "bench_rate", extraPlainRow)
	require.NoError(t, err)
	var events3, rows3, seconds int
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events`).Scan(&events3))
	require.Equal(t, events, events3, "the plain-row variant writes no events")
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE amount = 43) FROM bench_orders`).Scan(&rows3, &seconds))
	require.Positive(t, seconds)
	require.Equal(t, 2*seconds, rows3-rows2, "each transaction wrote both rows")
}
