package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
)

// Real restarts: the outbox database and the broker themselves stopped and
// started again under load, not a proxy cutting Ferry off from them. The
// shared PostgreSQL and RabbitMQ of the machine serve every other test, so
// these tests start their own (servers.StartPrivatePostgres,
// servers.StartRabbitNode) and remove them afterwards. Ferry, the
// producers, the checker consumer and the tap all use the private server;
// the checker accounts for every event. The long versions, several restarts
// each, are in faults_long_test.go.

// restartEnv is setup with the outbox database on a private PostgreSQL
// cluster (pg != nil) and/or the broker on a private RabbitMQ node.
func restartEnv(t *testing.T, privatePG, privateMQ bool) (e *env, pg *servers.PrivatePostgres, mq *servers.RabbitNode) {
	t.Helper()
	db := (*ferrytest.DB)(nil)
	if privatePG {
		pg = servers.StartPrivatePostgres(t)
		db = ferrytest.NewDB(t, pg.URL)
	} else {
		db = ferrytest.NewDB(t, "")
	}
	br := (*ferrytest.Broker)(nil)
	if privateMQ {
		mq = servers.StartRabbitNode(t, "")
		br = ferrytest.NewBroker(t, mq.URL)
	} else {
		br = ferrytest.NewBroker(t, "")
	}
	return setupOn(t, db, br), pg, mq
}

// stall is the longest time between two events' first deliveries on the
// tap, over the whole run: what an outage cost the consumers.
func (l *ledger) stall() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var longest time.Duration
	var last time.Time
	seen := map[string]bool{}
	for _, d := range l.all {
		if seen[d.id] || d.at.IsZero() {
			continue
		}
		seen[d.id] = true
		if !last.IsZero() && d.at.Sub(last) > longest {
			longest = d.at.Sub(last)
		}
		last = d.at
	}
	return longest
}

// outage is one stop and start of a private server under load.
type outage struct {
	what string        // e.g. "PostgreSQL stop -m fast"
	down time.Duration // stop to accepting connections again
}

// restartFigures is the line a restart test logs: events, stall, duplicates.
func restartFigures(outages []outage, r report, stall time.Duration) string {
	var parts []string
	for _, o := range outages {
		parts = append(parts, fmt.Sprintf("%s, down %s", o.what, o.down.Round(100*time.Millisecond)))
	}
	return fmt.Sprintf("%d restart(s) [%s]; %d events committed (%d producer transactions failed against the outage), longest gap in deliveries %s; %d duplicate copies, %d late copies, %d duplicate signals, %d redeliveries absorbed%s; drained %s after the load",
		len(outages), strings.Join(parts, "; "), r.Committed, r.Failed+r.Unknown-r.UnknownCommitted, stall.Round(100*time.Millisecond),
		r.DuplicateCopies, r.LateCopies, r.DuplicateSignals, r.Absorbed, r.journalFigures(), r.Drained.Round(100*time.Millisecond))
}

// stopPostgres stops the private cluster in mode, keeps it down for down,
// and starts it again; it returns the outage.
func stopPostgres(t *testing.T, pg *servers.PrivatePostgres, mode string, down time.Duration) outage {
	t.Helper()
	stopped := time.Now()
	pg.Stop(t, mode)
	time.Sleep(down - time.Since(stopped))
	pg.Start(t)
	return outage{what: "PostgreSQL stop -m " + mode, down: time.Since(stopped)}
}

// stopRabbitMQ stops the private node (rabbitmqctl stop), keeps it down for
// down, and starts it again on its data.
func stopRabbitMQ(t *testing.T, mq *servers.RabbitNode, down time.Duration) outage {
	t.Helper()
	stopped := time.Now()
	mq.Stop(t)
	time.Sleep(down - time.Since(stopped))
	mq.Start(t)
	return outage{what: "RabbitMQ rabbitmqctl stop", down: time.Since(stopped)}
}

// The outbox database is stopped for 20 s under load and started again:
// once cleanly (pg_ctl stop -m fast: sessions are terminated, a checkpoint
// is written) and once as a crash (-m immediate: no checkpoint, recovery
// from the WAL at start). Producers fail meanwhile; Ferry's pools, its
// LISTEN connection and the consumer's inbox reconnect, claims cut off
// roll back, and every committed event is delivered once, in order.
func TestFaultPostgresRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			inEachLane(t, func(t *testing.T, lane string) { runPostgresRestarts(t, lane, []string{mode}, 20*time.Second) })
		})
	}
}

// runPostgresRestarts runs `ferry run` in lane and a checker consumer on a
// private cluster under load, and stops and starts the cluster once per
// mode.
func runPostgresRestarts(t *testing.T, lane string, modes []string, down time.Duration) report {
	e, pg, _ := restartEnv(t, true, false)
	e.inLane(lane)
	c := e.newChecker(t)
	c.allowLate("marks lost to the outage leave confirmed rows to be published again")
	ferry := e.startProcess(t, "run")
	consumer := c.startConsumer(t)
	c.waitConsuming(t)
	stop := c.startLoad(load{})
	var outages []outage
	for _, mode := range modes {
		before := c.tap.unique()
		waitFor(t, time.Minute, "deliveries before the stop", func() bool { return c.tap.unique() > before+20 })
		outages = append(outages, stopPostgres(t, pg, mode, down))
	}
	time.Sleep(3 * time.Second) // the load goes on after the last restart
	stop()
	r := c.check(3 * time.Minute)
	stall := c.tap.stall()
	runs := c.runStatuses(context.Background())
	t.Log(restartFigures(outages, r, stall) + fmt.Sprintf("; aggregate runs by status: %v", runs))
	// A run that fails leaves its events dispatched and held by no run:
	// an outage must be waited out, never end a run.
	require.Zero(t, runs["Failed"]+runs["Timed_out"]+runs["Terminated"], "aggregate runs that did not survive the outage: %v", runs)
	require.False(t, ferry.exited(), "ferry run survived the restarts:\n%s", ferry.out.String())
	require.False(t, consumer.exited(), "the consumer survived the restarts:\n%s", consumer.out.String())
	require.Positive(t, r.Failed+r.Unknown, "producers ran into the outage")
	require.GreaterOrEqual(t, stall, down/2, "the outage shows in the deliveries")
	return r
}

// The broker is stopped for 30 s under load (rabbitmqctl stop: the node
// exits) and started again on its data. The tap and the checker's queues are
// durable and the messages persistent: what RabbitMQ confirmed before the
// stop is still there after it, what it had not confirmed Ferry publishes
// again. Rows wait in PostgreSQL meanwhile, none marked published without a
// confirm.
func TestFaultRabbitMQRestart(t *testing.T) {
	t.Parallel()
	inEachLane(t, func(t *testing.T, lane string) { runRabbitMQRestarts(t, lane, 1, 30*time.Second) })
}

// runRabbitMQRestarts runs `ferry run` in lane and a checker consumer
// against a private node under load and stops and starts the node n times.
func runRabbitMQRestarts(t *testing.T, lane string, n int, down time.Duration) report {
	e, _, mq := restartEnv(t, false, true)
	e.inLane(lane)
	c := e.newChecker(t)
	// Messages the broker took before it stopped whose confirms were lost
	// with the connection are published again, from the first unconfirmed.
	c.allowLate("confirms lost with the broker's connection leave routed messages to be published again")
	ferry := e.startProcess(t, "run")
	consumer := c.startConsumer(t)
	c.waitConsuming(t)
	stop := c.startLoad(load{})
	var outages []outage
	waiting := 0
	for range n {
		before := c.tap.unique()
		waitFor(t, time.Minute, "deliveries before the stop", func() bool { return c.tap.unique() > before+20 })
		stopped := time.Now()
		mq.Stop(t)
		time.Sleep(down / 2)
		published := e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`)
		time.Sleep(down - time.Since(stopped))
		require.Equal(t, published, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`),
			"nothing is marked published while the broker is down")
		waiting = max(waiting, e.count(t, `SELECT count(*) FROM outbox_events WHERE status <> 'published'`))
		mq.Start(t)
		outages = append(outages, outage{what: "RabbitMQ rabbitmqctl stop", down: time.Since(stopped)})
	}
	time.Sleep(3 * time.Second) // the load goes on after the last restart
	stop()
	r := c.check(3 * time.Minute)
	stall := c.tap.stall()
	t.Log(restartFigures(outages, r, stall) + fmt.Sprintf("; up to %d rows waited in PostgreSQL", waiting))
	require.False(t, ferry.exited(), "ferry run survived the restarts:\n%s", ferry.out.String())
	require.False(t, consumer.exited(), "the consumer survived the restarts:\n%s", consumer.out.String())
	require.Positive(t, waiting, "rows waited for the broker")
	require.GreaterOrEqual(t, stall, down/2, "the outage shows in the deliveries")
	return r
}

// Seed: 20 business rows committed with their events while Ferry is down;
// then Ferry is killed again at its start and PostgreSQL crashes (stop -m
// immediate) and comes back; then Ferry starts: 20 events delivered, 20
// business rows and 20 events stored, no orphan on either side.
func TestFaultSeedSurvivesRestarts(t *testing.T) {
	t.Parallel()
	inEachLane(t, runSeedSurvivesRestarts)
}

func runSeedSurvivesRestarts(t *testing.T, lane string) {
	e, pg, _ := restartEnv(t, true, false)
	e.inLane(lane)
	c := e.newChecker(t)
	c.allowLate("Ferry killed at its start may have published versions it never marked")
	consumer := c.startConsumer(t)
	c.waitConsuming(t)
	for i := range 20 {
		id := c.transact(aggID(i%4), committed)
		c.mu.Lock()
		got := c.attempts[id].outcome
		c.mu.Unlock()
		require.Equal(t, committed, got, "seed row %d committed", i)
	}
	// Ferry starts, is SIGKILLed right away (it may have claimed or
	// signalled some rows), and PostgreSQL crashes.
	e.startProcess(t, "run").kill()
	restarts := []outage{stopPostgres(t, pg, "immediate", 2*time.Second)}
	delivered := c.tap.unique()
	e.startProcess(t, "run")
	r := c.check(2 * time.Minute)
	require.Equal(t, 20, r.Committed)
	require.Equal(t, 20, r.Delivered)
	require.Equal(t, 20, r.EffectsOnce)
	require.Zero(t, r.Orphans)
	require.Equal(t, 20, e.count(t, `SELECT count(*) FROM orders`), "20 business rows")
	require.Equal(t, 20, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`), "20 events, published")
	require.False(t, consumer.exited(), "the consumer survived the crash:\n%s", consumer.out.String())
	t.Logf("seed: 20 rows and events committed, Ferry killed at start (%d delivered before), %s; %d delivered after, %d duplicate copies, %d orphans",
		delivered, restartFigures(restarts, r, c.tap.stall()), r.Delivered, r.DuplicateCopies, r.Orphans)
}
