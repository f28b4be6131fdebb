package poller

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
)

// A direct publish that takes longer than MarkTimeout (the broker's
// confirm held back 1.5 s by a stalled proxy in front of RabbitMQ; the
// mark timeout is 1 s) is still marked, once: the mark has MarkTimeout of
// its own once the publishes are over, and since they end by the claim
// plus Lease - MarkTimeout (the confirm wait's deadline, then the broker's
// close), the mark still ends inside the lease. When the mark's timeout
// ran from the claim, a slow publish used it up, the mark failed, and the
// rows came back after the lease to be published again: a backlog of
// 100,000 rows (claims of 20,000) was republished batch after batch and
// never drained (TestLongBacklog/publish-first).
func TestLaneMarksAPublishSlowerThanTheMarkTimeout(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	br := ferrytest.NewBroker(t, "")
	target, proxy := proxiedTarget(t, br)
	p := newPoller(t, db.Pool, Config{Lane: LanePublishFirst, Target: target, MarkTimeout: time.Second})
	ctx := context.Background()

	first := insertEvent(t, db.Pool, "order", "A", nil)
	_, err := p.Drain(ctx) // the publisher's connection is up
	require.NoError(t, err)
	require.Equal(t, "published", readRow(t, db.Pool, first).Status)

	second := insertEvent(t, db.Pool, "order", "A", nil)
	proxy.Stall()
	unstall := time.AfterFunc(1500*time.Millisecond, proxy.Unstall)
	t.Cleanup(func() { unstall.Stop() })
	began := time.Now()
	_, err = p.Drain(ctx)
	took := time.Since(began)
	require.NoError(t, err)
	require.GreaterOrEqual(t, took, 1500*time.Millisecond, "the publish waited for the held confirm")
	require.Equal(t, "published", readRow(t, db.Pool, second).Status, "marked after a publish of %s", took.Round(time.Millisecond))
	var owners int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_owners`).Scan(&owners))
	require.Zero(t, owners, "the aggregate was given back")
	require.Len(t, br.Collect(t, 3, 2*time.Second), 2, "each version published once")
}

// The lane's claim does not write the rows it takes, so its mark counts
// the publish in attempts: a row published at its first attempt reads 1,
// as in the workflow lane, and a broker-wide failure (dialling RabbitMQ
// refused) counts as an attempt of the rows it sent back.
func TestLaneMarkCountsAttempts(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	br := ferrytest.NewBroker(t, "")
	target, proxy := proxiedTarget(t, br)
	p := newPoller(t, db.Pool, Config{Lane: LanePublishFirst, Target: target})
	ctx := context.Background()

	first := insertEvent(t, db.Pool, "order", "A", nil)
	_, err := p.Drain(ctx)
	require.NoError(t, err)
	r := readRow(t, db.Pool, first)
	require.Equal(t, "published", r.Status)
	require.Equal(t, 1, r.Attempts, "published at its first attempt")

	proxy.Pause()
	second := insertEvent(t, db.Pool, "order", "A", nil)
	_, err = p.Drain(ctx)
	require.NoError(t, err)
	r = readRow(t, db.Pool, second)
	require.Equal(t, "pending", r.Status, "the broker was away")
	require.NotNil(t, r.LastError)
	require.Equal(t, 1, r.Attempts, "the failed publish counted: %s", *r.LastError)

	proxy.Resume()
	eventually(t, 30*time.Second, func() bool {
		_, err := p.Drain(ctx)
		require.NoError(t, err)
		return readRow(t, db.Pool, second).Status == "published"
	}, "the second event published once the broker is back")
	require.Equal(t, 2, readRow(t, db.Pool, second).Attempts)
	require.Len(t, br.Collect(t, 3, 2*time.Second), 2, "each version published once")
}

// The direct claim reads about the rows it takes, not the backlog: its
// scan of outbox_events follows the pending rows' index and stops at the
// LIMIT, in a plan for these parameters and in the generic plan
// PostgreSQL switches a prepared statement to. When the next-version test
// was a join with outbox_aggregates, PostgreSQL misjudged its selectivity,
// joined and sorted every pending row (a 5,000-row backlog read whole for
// each claim of 200, 60 ms at 20,000 rows against 1 ms), and the lane fell
// behind the plain relay on a backlog; a window over the LIMIT read every
// row sharing the last one's next_attempt_at (here: all of them).
//
// And PostgreSQL must not think the claim costly: over jit_above_cost it
// JIT-compiles every claim (laneCandidates says how the next-version test
// once made it so: 668,000 on the 10 × 10 backlog below, 600 ms a claim).
// The plan for the claim's parameters, which the plan cache runs first
// and keeps while it is the cheaper, must stay below it.
func TestLaneClaimReadsWhatItTakesNotTheBacklog(t *testing.T) {
	t.Parallel()
	const batch = 200
	for _, shape := range []struct {
		name       string
		aggs, each int
	}{{"one event per aggregate", 5000, 1}, {"10 events per aggregate", 10_000, 10}} {
		t.Run(shape.name, func(t *testing.T) {
			db := ferrytest.NewDB(t, "")
			ctx := context.Background()
			backlog := shape.aggs * shape.each
			// One statement: every row has the same next_attempt_at.
			_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
				SELECT 'order', 'a' || (g / $2), 'order.placed', '{}' FROM generate_series(0, $1 - 1) g ORDER BY g`, backlog, shape.each)
			require.NoError(t, err)
			_, err = db.Pool.Exec(ctx, `ANALYZE outbox_events, outbox_aggregates, outbox_owners`)
			require.NoError(t, err)
			var jitAbove float64
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT current_setting('jit_above_cost')::float8`).Scan(&jitAbove))

			for _, mode := range []string{"auto", "force_generic_plan"} {
				read, cost := explainLaneClaim(t, db.Pool, mode, batch)
				require.Greater(t, read, 0.0, "%s: the plan reads outbox_events", mode)
				require.LessOrEqual(t, read, float64(2*batch*shape.each),
					"%s: a claim of %d aggregates read %.0f rows of a %d-row backlog: the scan no longer stops at the LIMIT", mode, batch, read, backlog)
				if mode == "auto" {
					require.Less(t, cost, jitAbove,
						"the claim's plan is costed at %.0f, over jit_above_cost (%.0f): PostgreSQL JIT-compiles every claim", cost, jitAbove)
				}
			}
		})
	}
}

// explainLaneClaim runs the direct claim of batch aggregates under
// EXPLAIN ANALYZE, in a transaction it rolls back, with plan_cache_mode
// mode, and returns the most rows a node read from outbox_events and the
// plan's total cost.
func explainLaneClaim(t *testing.T, pool *pgxpool.Pool, mode string, batch int) (read, cost float64) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "PREPARE lane_claim AS "+sqlLaneClaim)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE lane_claim") }()
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	var plan []map[string]any
	require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf(
		`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE lane_claim(%d, '30 seconds', 'relay-a', %d, %d)`,
		batch, maxDirectRun, (1+claimExtension)*batch)).Scan(&plan))
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if n["Relation Name"] == "outbox_events" && n["Node Type"] != "ModifyTable" {
			read = max(read, n["Actual Rows"].(float64)*n["Actual Loops"].(float64))
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	top := plan[0]["Plan"].(map[string]any)
	walk(top)
	return read, top["Total Cost"].(float64)
}

// One claim pass of the lane (Drain) overlaps direct batches and still
// takes every row: 20 aggregates × 10 events, with claims of 4 aggregates
// and at most 20 rows (two aggregates whole, two taken without a row),
// are all published in one pass, each aggregate's versions in order and
// once; no aggregate is ever in two publishes at once, and no owner row
// is left. A batch gives up the aggregates it took no row of before the
// next claim: given up later, while that claim ran, they were skipped as
// leased and the pass ended with their rows pending.
func TestLaneDrainOverlapsBatchesAndTakesEveryRow(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	br := ferrytest.NewBroker(t, "")
	br.Bind(t, "#")
	pub, err := broker.New(broker.Config{URL: br.URL, Exchange: br.Exchange})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	inner, err := rabbitmq.New(rabbitmq.Config{Publisher: pub})
	require.NoError(t, err)
	target := &overlapTarget{inner: inner, inflight: map[string]bool{}}
	p := newPoller(t, db.Pool, Config{Lane: LanePublishFirst, Target: target, BatchSize: 4})
	ctx := context.Background()
	const aggs, per = 20, 10
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'a' || (g % $1), 'order.placed', '{}' FROM generate_series(0, $2) g ORDER BY g`, aggs, aggs*per-1)
	require.NoError(t, err)

	n, err := p.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, aggs*per, n, "one pass took every row")
	var pending, owners int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'published') FROM outbox_events`).Scan(&pending))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_owners`).Scan(&owners))
	require.Zero(t, pending, "rows left unpublished by the pass")
	require.Zero(t, owners, "owner rows left behind")
	require.Zero(t, target.overlaps, "an aggregate was in two publishes at once")

	last := map[string]int64{}
	for _, d := range br.Collect(t, aggs*per+1, 2*time.Second) {
		id := d.Headers[broker.HeaderAggregateID].(string)
		v := d.Headers[broker.HeaderAggregateVersion].(int64)
		require.Equal(t, last[id]+1, v, "aggregate %s: version %d after %d", id, v, last[id])
		last[id] = v
	}
	require.Len(t, last, aggs)
}

// overlapTarget counts publishes of an aggregate that began while another
// publish of it was in flight.
type overlapTarget struct {
	inner    delivery.Target
	mu       sync.Mutex
	inflight map[string]bool
	overlaps int
}

func (o *overlapTarget) Publish(ctx context.Context, events []delivery.Event) (int, error) {
	key := events[0].Row.AggregateType + "/" + events[0].Row.AggregateID
	o.mu.Lock()
	if o.inflight[key] {
		o.overlaps++
	}
	o.inflight[key] = true
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.inflight, key)
		o.mu.Unlock()
	}()
	return o.inner.Publish(ctx, events)
}

// proxiedTarget is a RabbitMQ target that reaches br through a proxy the
// test can stall or pause.
func proxiedTarget(t *testing.T, br *ferrytest.Broker) (*rabbitmq.Target, *servers.Proxy) {
	t.Helper()
	u, err := url.Parse(br.URL)
	require.NoError(t, err)
	proxy := servers.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	pub, err := broker.New(broker.Config{URL: u.String(), Exchange: br.Exchange, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	target, err := rabbitmq.New(rabbitmq.Config{Publisher: pub})
	require.NoError(t, err)
	return target, proxy
}
