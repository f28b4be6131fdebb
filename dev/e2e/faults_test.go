package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	_ "modernc.org/sqlite" // reads the embedded server's SQLite file

	"github.com/ferry-outbox/ferry/broker"
	fdelivery "github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/internal/failpoint"
	"github.com/ferry-outbox/ferry/internal/publishjournal"
	"github.com/ferry-outbox/ferry/internal/testhook"
	"github.com/ferry-outbox/ferry/poller"
)

// The fault suite: each test runs a checker workload (see checker_test.go)
// through Ferry in processes of its own while one fault strikes, and the
// checker accounts for every event. The long versions are in
// faults_long_test.go (build tag faults, `make test-faults`).
//
// Each test runs in both delivery lanes, as subtests named after the lane
// (inEachLane): the workflow lane, and the publish-first lane (FERRY_LANE
// for the processes, poller.Config.Lane for pollers in this process), in
// which the checker also keeps the publish journal and fails on two
// owners publishing one aggregate at once. A test whose subject belongs
// to one lane says so.

// lanes are the delivery lanes the fault suite runs in.
var lanes = []string{poller.LaneWorkflow, poller.LanePublishFirst}

// inEachLane runs f as a parallel subtest per lane.
func inEachLane(t *testing.T, f func(t *testing.T, lane string)) {
	for _, lane := range lanes {
		t.Run(lane, func(t *testing.T) {
			t.Parallel()
			f(t, lane)
		})
	}
}

// With no fault at all the checker passes and counts no duplicate and no
// late copy: the baseline the fault tests are read against. In the
// publish-first lane no event goes to a workflow, and every publish is in
// the journal.
func TestFaultNone(t *testing.T) {
	t.Parallel()
	inEachLane(t, func(t *testing.T, lane string) {
		e := setup(t).inLane(lane)
		c := e.newChecker(t)
		e.startProcess(t, "run")
		c.startConsumer(t)
		c.waitConsuming(t)
		c.runLoad(load{limit: 150})
		r := c.check(time.Minute)
		require.Zero(t, r.DuplicateCopies+r.DuplicateSignals+r.Absorbed, "no fault, no duplicate")
		if lane == poller.LanePublishFirst {
			require.Zero(t, r.Signals, "every event published at its first attempt, none handed to a workflow")
			require.Positive(t, r.Journaled, "the journal recorded the lane's publishes")
		}
	})
}

// Crash points reached deterministically: a process with FERRY_FAILPOINTS
// SIGKILLs itself at the named point, mid-stream, and a fresh process takes
// over. Ferry runs as one `ferry poller`, one `ferry worker` and one checker
// consumer. The relay's crash points are the lane's own (poller.* in the
// workflow lane, lane.* in the publish-first lane); the worker's publishes
// only aggregates handed to workflows, so its crash point is the workflow
// lane's; the consumer's run in both.
func TestFaultCrashPoints(t *testing.T) {
	t.Parallel()
	require.True(t, failpoint.Enabled, "failpoints need a build with -tags failpoints (make test sets it)")
	workflowLane, publishFirst := []string{poller.LaneWorkflow}, []string{poller.LanePublishFirst}
	tests := []struct {
		name      string
		lanes     []string // nil: both
		role      string   // poller, worker or consumer
		failpoint string
		// late: why the kill may repeat a run of versions ("": it cannot,
		// and the checker fails on a late copy).
		late  string
		check func(t *testing.T, e *env, r report)
	}{
		{
			// The claimed rows are invisible for the lease (12s here), then
			// claimed again and signalled once: a claim without a signal
			// costs time, never an event.
			name: "poller after claim before signal", lanes: workflowLane, role: "poller", failpoint: "poller.after-claim=exit@3",
			check: func(t *testing.T, e *env, r report) {
				require.Positive(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE attempts > 1`), "the dead poller's rows were claimed again")
				require.Zero(t, r.DuplicateSignals, "the dead poller never signalled them")
			},
		},
		{
			// Temporal has the events; the rows stay pending until the
			// workflow publishes them (or the lease ends and they are
			// signalled again, and the workflow drops the repeat).
			name: "poller after signal before mark", lanes: workflowLane, role: "poller", failpoint: "poller.after-signal=exit@3",
		},
		{
			// The message is in RabbitMQ, the row not marked: the activity
			// times out (10s) and its retry publishes again. The tap sees the
			// copy; the inbox absorbs it. A batch the fast path confirmed goes
			// out again from its first version, after its last.
			name: "worker after confirm before mark", lanes: workflowLane, role: "worker", failpoint: "worker.after-confirm=exit@10",
			late: "the killed worker's confirmed batch is published again",
			check: func(t *testing.T, _ *env, r report) {
				require.Positive(t, r.DuplicateCopies, "the confirmed message was published again")
			},
		},
		{
			// The relay owns the aggregates it claimed (owner rows with a
			// lease) and dies before publishing: the aggregates and their rows
			// wait out the lease, then a relay claims them under new epochs
			// and publishes them once.
			name: "relay after claim before publish", lanes: publishFirst, role: "poller", failpoint: "lane.after-claim=exit@3",
			check: func(t *testing.T, e *env, r report) {
				// A direct claim writes no row (its lease is the owner row's):
				// what shows the takeover is rows that waited out the dead
				// relay's lease (12 s here) before a relay published them.
				require.Positive(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published' AND published_at - created_at > interval '10 seconds'`),
					"the dead relay's aggregates were taken over after its lease")
				require.Zero(t, r.DuplicateCopies, "the dead relay published none of them")
				require.Zero(t, r.Unended, "it died before it began a publish")
			},
		},
		{
			// The messages are in RabbitMQ, the rows not marked and the
			// aggregates still the dead relay's: after the lease the next
			// relay takes them over under new epochs and publishes them
			// again, from the first unmarked version on. The journal has the
			// dead relay's publishes ended (their confirms came) and no other
			// owner's during them.
			name: "relay after confirm before mark", lanes: publishFirst, role: "poller", failpoint: "lane.after-confirm=exit@3",
			late: "the killed relay's confirmed versions are published again, from the first",
			check: func(t *testing.T, e *env, r report) {
				require.Positive(t, r.DuplicateCopies, "the confirmed messages were published again")
				require.Positive(t, e.count(t, `SELECT count(*) FROM `+publishjournal.Table+` a JOIN `+publishjournal.Table+` b
					ON b.aggregate_id = a.aggregate_id AND b.epoch > a.epoch AND b.first_version <= a.last_version AND a.first_version <= b.last_version`),
					"versions were published under two epochs: the dead relay's and its successor's")
			},
		},
		{
			// The effect committed, the ack never left: the broker
			// redelivers and the inbox says duplicate.
			name: "consumer after commit before ack", role: "consumer", failpoint: "consumer.after-commit=exit@10",
			check: func(t *testing.T, _ *env, r report) {
				require.Positive(t, r.Absorbed, "the redelivery was absorbed by the inbox")
			},
		},
		{
			// The effect was written in a transaction that never committed:
			// PostgreSQL rolls it back, the broker redelivers, and it is
			// applied once.
			name: "consumer before commit", role: "consumer", failpoint: "consumer.before-commit=exit@10",
		},
	}
	inEachLane(t, func(t *testing.T, lane string) {
		for _, tt := range tests {
			if tt.lanes != nil && !slices.Contains(tt.lanes, lane) {
				continue
			}
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				e := setup(t).inLane(lane)
				c := e.newChecker(t)
				if tt.late != "" {
					c.allowLate(tt.late)
				}
				fp := "FERRY_FAILPOINTS=" + tt.failpoint
				start := map[string]func(env ...string) *child{
					"poller":   func(env ...string) *child { return e.startProcess(t, "poller", env...) },
					"worker":   func(env ...string) *child { return e.startProcess(t, "worker", env...) },
					"consumer": func(env ...string) *child { return c.startConsumer(t, env...) },
				}
				var victim *child
				for _, role := range []string{"worker", "consumer", "poller"} {
					if role == tt.role {
						victim = start[role](fp)
					} else {
						start[role]()
					}
				}
				c.waitConsuming(t)

				began := time.Now()
				stop := c.startLoad(load{})
				victim.waitExit(t, time.Minute)
				name, _, _ := strings.Cut(tt.failpoint, "=")
				require.Contains(t, victim.out.String(), "failpoint "+name+": killing process", "died at the failpoint")
				killedAt := time.Since(began)
				start[tt.role]()
				time.Sleep(max(0, 4*time.Second-time.Since(began))) // keep the load on for a while after the restart
				stop()
				r := c.check(2 * time.Minute)
				t.Logf("%s: killed at %s into the load; %d events committed, %d lost, %d duplicate copies, %d late copies, %d duplicate signals, %d redeliveries absorbed; drained %s after the load stopped",
					tt.failpoint, killedAt.Round(time.Millisecond), r.Committed, r.Lost, r.DuplicateCopies, r.LateCopies, r.DuplicateSignals, r.Absorbed, r.Drained.Round(time.Millisecond))
				if tt.check != nil {
					tt.check(t, e, r)
				}
			})
		}
	})
}

// RabbitMQ's memory alarm blocks every publishing connection of the broker
// (rabbitmqctl set_vm_memory_high_watermark 0.0000001) for 5s under load:
// nothing is confirmed, so nothing is marked published, and everything flows
// once the watermark is restored. The broker is a node of the test's own
// (the alarm would block every publisher of a shared one).
func TestFaultRabbitMQMemoryAlarm(t *testing.T) {
	t.Parallel()
	inEachLane(t, runMemoryAlarm)
}

func runMemoryAlarm(t *testing.T, lane string) {
	e, _, mq := restartEnv(t, false, true)
	e.inLane(lane)
	c := e.newChecker(t)
	// Publishes the alarm cut off (their confirm wait ended, the connection
	// was dropped) go out again from their first version; and what a
	// blocked connection had sent the broker may still be routed when the
	// alarm clears.
	c.allowLate("publishes the alarm cut off are sent again")
	e.startProcess(t, "run")
	c.startConsumer(t)
	c.waitConsuming(t)
	stop := c.startLoad(load{})
	waitFor(t, time.Minute, "deliveries before the alarm", func() bool { return c.tap.unique() > 20 })

	clear := memoryAlarm(t, mq)
	raised := time.Now()
	time.Sleep(time.Second) // publishes already read by the broker still land
	before, published := c.tap.unique(), e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`)
	time.Sleep(4 * time.Second)
	during := c.tap.unique() - before
	markedDuring := e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`) - published
	waiting := e.count(t, `SELECT count(*) FROM outbox_events WHERE status <> 'published'`)
	clear()
	alarm := time.Since(raised)
	time.Sleep(2 * time.Second) // the load goes on after the alarm
	stop()
	r := c.check(2 * time.Minute)
	t.Logf("memory alarm for %s: %d deliveries and %d rows marked published in the last 4s of it, %d rows waiting at its end; %d committed, %d lost, %d duplicate copies, %d late copies",
		alarm.Round(100*time.Millisecond), during, markedDuring, waiting, r.Committed, r.Lost, r.DuplicateCopies, r.LateCopies)
	require.Zero(t, during, "nothing is routed while the alarm blocks publishers")
	require.Zero(t, markedDuring, "nothing is marked published without a confirm")
	require.Positive(t, waiting, "rows waited for the broker")
}

// Ferry's PostgreSQL sessions (poller, worker and consumer processes, found
// by application_name) are terminated with pg_terminate_backend five times
// under load: pools reconnect, the LISTEN connection comes back, interrupted
// transactions roll back and are retried.
func TestFaultPostgresSessionsTerminated(t *testing.T) {
	t.Parallel()
	inEachLane(t, runSessionsTerminated)
}

func runSessionsTerminated(t *testing.T, lane string) {
	e := setup(t).inLane(lane)
	c := e.newChecker(t)
	// A mark whose session was terminated leaves confirmed rows unmarked:
	// they are published again, from the first.
	c.allowLate("marks cut off with their session leave confirmed rows to be published again")
	e.startProcess(t, "poller")
	e.startProcess(t, "worker")
	c.startConsumer(t)
	c.waitConsuming(t)
	stop := c.startLoad(load{})
	terminated := map[string]int{}
	for range 5 {
		time.Sleep(time.Second)
		rows, err := e.db.Pool.Query(context.Background(), `SELECT split_part(application_name, '/', 2), pg_terminate_backend(pid)
			FROM pg_stat_activity WHERE starts_with(application_name, $1)`, e.db.Schema+"/")
		require.NoError(t, err)
		for rows.Next() {
			var role string
			var ok bool
			require.NoError(t, rows.Scan(&role, &ok))
			if ok {
				terminated[role]++
			}
		}
		require.NoError(t, rows.Err())
	}
	time.Sleep(time.Second)
	stop()
	r := c.check(2 * time.Minute)
	t.Logf("terminated sessions %v; %d committed, %d lost, %d duplicate copies, %d late copies, %d duplicate signals",
		terminated, r.Committed, r.Lost, r.DuplicateCopies, r.LateCopies, r.DuplicateSignals)
	for _, role := range []string{"poller", "worker", "consumer"} {
		require.Positive(t, terminated[role], "sessions of the %s were terminated", role)
	}
}

// The Temporal server is SIGKILLed under load and started again 5s later on
// the same port and SQLite file (a server of this test's own, in a process of
// its own, so the shared one keeps serving the other tests). Workflows, their
// signals, timers and activities survive; the poller's failed signals are
// retried. In the publish-first lane the relay publishes without Temporal:
// deliveries go on while it is down. No fault here repeats a publish: no
// late copy in either lane.
func TestFaultTemporalRestart(t *testing.T) {
	t.Parallel()
	inEachLane(t, runTemporalRestart)
}

func runTemporalRestart(t *testing.T, lane string) {
	srv := startOwnTemporal(t)
	e := setup(t).inLane(lane)
	c := e.newChecker(t)
	c.useTemporal(srv.client, srv.namespace)
	e.startProcess(t, "run", srv.env()...)
	c.startConsumer(t)
	c.waitConsuming(t)
	stop := c.startLoad(load{})
	waitFor(t, time.Minute, "deliveries before the stop", func() bool { return c.tap.unique() > 20 })

	stopped := time.Now()
	srv.kill()
	time.Sleep(time.Second) // what was on its way when it died
	before := c.tap.unique()
	time.Sleep(4 * time.Second)
	during := c.tap.unique() - before
	pending := e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'pending'`)
	delivered := c.tap.unique()
	srv.start(t)
	down := time.Since(stopped)
	stop()
	waitFor(t, 2*time.Minute, "a delivery after the restart", func() bool { return c.tap.unique() > delivered })
	resumed := time.Since(stopped) - down
	r := c.check(3 * time.Minute)
	t.Logf("Temporal down for %s (kill to frontend ready), %d deliveries in 4 s of it, %d rows pending at the restart, first delivery %s after it; %d committed, %d lost, %d duplicate copies, %d duplicate signals",
		down.Round(100*time.Millisecond), during, pending, resumed.Round(100*time.Millisecond), r.Committed, r.Lost, r.DuplicateCopies, r.DuplicateSignals)
	if lane == poller.LanePublishFirst {
		require.Positive(t, during, "the lane published while Temporal was down")
		require.Zero(t, r.Signals, "and handed nothing to a workflow")
		return
	}
	require.Positive(t, pending, "rows waited for Temporal")
}

// The embedded server started again at once on the same SQLite file (`ferry
// dev` or `make run` run twice in a row) moves workflows at once: it forgets
// the dead cluster members of its last run instead of trying to join them
// until they time out, which took ~50 s, longer than a Ferry process's start
// timeout (its schedules call failed and it exited).
func TestTemporalRestartedAtOnceServesAtOnce(t *testing.T) {
	t.Parallel()
	srv := startOwnTemporal(t)
	before := clusterMembers(t, srv.dbPath)
	require.NotEmpty(t, before)
	srv.kill()
	srv.start(t)
	after := clusterMembers(t, srv.dbPath)
	for _, m := range before {
		require.NotContains(t, after, m, "a member of the killed server is still on record")
	}
	e := setup(t)
	e.startProcess(t, "run", srv.env()...)
	e.commitN(t, 3, 1)
	msgs := e.br.Collect(t, 3, time.Minute)
	require.Len(t, msgs, 3, "events delivered through the restarted server")
}

// clusterMembers lists the host:port of every cluster member on record in
// the embedded server's SQLite file.
func clusterMembers(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query(`SELECT rpc_address || ':' || rpc_port FROM cluster_membership`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var m string
		require.NoError(t, rows.Scan(&m))
		out = append(out, m)
	}
	require.NoError(t, rows.Err())
	return out
}

// Four `ferry poller` processes compete for one outbox (FOR UPDATE SKIP
// LOCKED and a lease; in the publish-first lane ownership of each
// aggregate too): every row is claimed by one of them, no event is
// signalled twice, and in the publish-first lane none is published twice.
func TestFaultCompetingPollers(t *testing.T) {
	t.Parallel()
	inEachLane(t, func(t *testing.T, lane string) {
		e := setup(t).inLane(lane)
		c := e.newChecker(t)
		for range 4 {
			e.startProcess(t, "poller")
		}
		e.startProcess(t, "worker")
		c.startConsumer(t)
		c.waitConsuming(t)
		c.runLoad(load{producers: 4, aggregates: 40, pause: 5 * time.Millisecond, limit: 400})
		r := c.check(2 * time.Minute)
		claimers := e.count(t, `SELECT count(DISTINCT claimed_by) FROM outbox_events`)
		reclaimed := e.count(t, `SELECT count(*) FROM outbox_events WHERE attempts > 1`)
		t.Logf("4 pollers: rows claimed by %d of them, %d rows claimed more than once; %d committed, %d duplicate signals, %d duplicate copies%s",
			claimers, reclaimed, r.Committed, r.DuplicateSignals, r.DuplicateCopies, r.journalFigures())
		require.GreaterOrEqual(t, claimers, 2, "the pollers shared the work")
		require.Zero(t, r.DuplicateSignals, "a lease longer than signal + mark: no row is signalled twice")
		if lane == poller.LanePublishFirst {
			require.Zero(t, r.DuplicateCopies, "one owner per aggregate: no row is published twice")
		}
	})
}

// The negative controls: a lease shorter than the work done under it must
// make the fault the checker exists to see, and the checker must see it.
//
// workflow: two pollers with a lease (300ms) shorter than their signals
// take (Temporal stalled for them) must signal the same events twice, and
// the checker must count it. This needs a test-only switch
// (testhook.AllowShortLease; no Config or command can set it), so these
// pollers run in the test process; the worker and the consumer are
// processes. The aggregate workflow drops the repeats: no message is
// published twice.
//
// publish-first: a relay whose publish stalls far past its lease (5 s),
// deadline or not, as a relay paused by a stopped VM or a long GC pause
// would (its Target holds every publish until the test lets go, then
// sends it), while a second relay takes its aggregates over when the lease
// runs out and publishes them. When the first wakes up it publishes what
// it claimed: two owners published the same versions at once. The journal
// must show it, the tap sees the copies, and the first relay's marks are
// refused (its epoch is gone). Both relays run in the test process.
func TestFaultShortLeaseNegativeControl(t *testing.T) {
	t.Parallel()
	t.Run(poller.LaneWorkflow, func(t *testing.T) {
		t.Parallel()
		shortLeaseSignals(t)
	})
	t.Run(poller.LanePublishFirst, func(t *testing.T) {
		t.Parallel()
		stalledRelayPublishes(t)
	})
}

// stallTarget holds every publish while stalled, past any deadline, and
// sends it when released; afterwards it publishes as its target does.
type stallTarget struct {
	inner   fdelivery.Target
	release chan struct{}
	held    atomic.Int64
}

func (s *stallTarget) Publish(ctx context.Context, events []fdelivery.Event) (int, error) {
	select {
	case <-s.release:
	default:
		s.held.Add(1)
		<-s.release
		// It slept through its deadline, as a paused process does.
		ctx = context.WithoutCancel(ctx)
	}
	return s.inner.Publish(ctx, events)
}

func stalledRelayPublishes(t *testing.T) {
	e := setup(t).inLane(poller.LanePublishFirst)
	c := e.newChecker(t)
	c.allowLate("negative control: two relays publish one aggregate at once")
	c.overlapping = "negative control: a publish stalled past its lease"
	c.startConsumer(t)
	c.waitConsuming(t)
	relay := func(name string, wrap func(fdelivery.Target) fdelivery.Target) {
		pub, err := broker.New(broker.Config{URL: e.br.URL, Exchange: e.br.Exchange, DialTimeout: 2 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		target, err := rabbitmq.New(rabbitmq.Config{Publisher: pub})
		require.NoError(t, err)
		p, err := poller.New(poller.Config{Pool: e.db.Pool, Temporal: tclient, TaskQueue: e.taskQueue, Name: name,
			Lane: poller.LanePublishFirst, Target: wrap(target),
			Lease: 5 * time.Second, SignalTimeout: time.Second, MarkTimeout: time.Second, PollInterval: 50 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		require.NoError(t, p.Start(context.Background()))
		t.Cleanup(p.Stop)
	}
	stall := &stallTarget{release: make(chan struct{})}
	released := sync.OnceFunc(func() { close(stall.release) })
	t.Cleanup(released)
	relay("stalled-relay", func(target fdelivery.Target) fdelivery.Target { stall.inner = target; return stall })
	c.runLoad(load{limit: 60, pause: time.Millisecond})
	waitFor(t, 30*time.Second, "the first relay's publish to hang", func() bool { return stall.held.Load() > 0 })
	var stalledAggs []string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(array_agg(aggregate_id), '{}') FROM outbox_owners WHERE holder = 'stalled-relay'`).Scan(&stalledAggs))
	require.NotEmpty(t, stalledAggs, "the stalled relay owns the aggregates it is publishing")
	relay("healthy-relay", func(target fdelivery.Target) fdelivery.Target { return target })
	// Taken over: rows of an aggregate the stalled relay held, published by
	// the healthy one once the lease ran out.
	const takenOver = `SELECT count(*) FROM outbox_events WHERE claimed_by = 'healthy-relay' AND status = 'published' AND aggregate_id = ANY($1)`
	waitFor(t, time.Minute, "the healthy relay to take over and publish what the stalled one claimed", func() bool {
		return e.count(t, takenOver, stalledAggs) > 0
	})
	took := e.count(t, takenOver, stalledAggs)
	released()
	r := c.check(2 * time.Minute)
	t.Logf("a publish stalled past its 5s lease: %d rows taken over and published meanwhile; the checker counted %d pairs of publishes by two owners at once (of %d recorded), %d duplicate copies, %d late copies",
		took, r.Overlaps, r.Journaled, r.DuplicateCopies, r.LateCopies)
	require.Positive(t, r.Overlaps, "the journal shows two owners publishing one aggregate at once")
	require.Positive(t, r.DuplicateCopies, "both published the same versions")
}

func shortLeaseSignals(t *testing.T) {
	e := setup(t)
	c := e.newChecker(t)
	e.startProcess(t, "worker")
	c.startConsumer(t)
	c.waitConsuming(t)

	proxy := servers.NewProxy(t, temporalAddr)
	pc, err := client.Dial(client.Options{HostPort: proxy.Addr(), Namespace: namespace, Logger: ferrytest.QuietLogger()})
	require.NoError(t, err)
	t.Cleanup(pc.Close)
	for i := range 2 {
		p, err := poller.New(testhook.AllowShortLease(poller.Config{
			Pool: e.db.Pool, Temporal: pc, TaskQueue: e.taskQueue, Name: fmt.Sprintf("short-lease-%d", i),
			Lease: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		}))
		require.NoError(t, err)
		require.NoError(t, p.Start(context.Background()))
		t.Cleanup(p.Stop)
	}

	proxy.Stall()
	c.runLoad(load{limit: 60, pause: time.Millisecond})
	waitFor(t, 30*time.Second, "rows claimed by both pollers while their signals hang", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE attempts > 1`) > 0
	})
	stalled := e.count(t, `SELECT count(*) FROM outbox_events WHERE attempts > 1`)
	proxy.Unstall()
	r := c.check(2 * time.Minute)
	t.Logf("lease 300ms < signal time: %d rows claimed twice during the stall; the checker counted %d duplicate signals of %d, %d duplicate copies",
		stalled, r.DuplicateSignals, r.Signals, r.DuplicateCopies)
	require.Positive(t, r.DuplicateSignals, "the checker sees the duplicates a too-short lease makes")
	require.Zero(t, r.DuplicateCopies, "the aggregate workflow drops a repeated signal")
}

// Commit order is not id order: a transaction that took its event id
// (UUIDv7), created_at and next_attempt_at first stays open while 100 later
// transactions commit and are delivered; when it commits, it is delivered
// too. A relay with a "last seen id" cursor would have skipped it.
func TestFaultCommitOrderGap(t *testing.T) {
	t.Parallel()
	inEachLane(t, runCommitOrderGap)
}

func runCommitOrderGap(t *testing.T, lane string) {
	e := setup(t).inLane(lane)
	c := e.newChecker(t)
	e.startProcess(t, "run")
	c.startConsumer(t)
	c.waitConsuming(t)

	held, commit := c.hold("held")
	c.runLoad(load{limit: 100})
	later := c.count(committed)
	waitFor(t, time.Minute, "every later event delivered", func() bool { return c.tap.unique() == later })
	require.False(t, c.tap.seen[held])
	require.Equal(t, later, e.count(t, `SELECT count(*) FROM outbox_events WHERE id > $1::uuid`, held),
		"the held event's id sorts before every later one")
	commit()
	r := c.check(time.Minute)
	c.tap.mu.Lock()
	before := map[string]bool{} // events first seen before the held one
	for _, d := range c.tap.all {
		if d.id == held {
			break
		}
		before[d.id] = true
	}
	c.tap.mu.Unlock()
	require.Len(t, before, later, "delivered after all the later ones, once it committed")
	t.Logf("1 event held open while %d later ones committed and were delivered; then delivered; %d lost", later, r.Lost)
}

// A short kill loop: every 2-4s one of two `ferry poller`, two `ferry
// worker` and two checker consumer processes is SIGKILLed (and restarted
// within a second) for 20s under steady load; every role is hit once in each
// round of three kills. The long version is TestLongKillLoop.
func TestFaultKillLoop(t *testing.T) {
	t.Parallel()
	inEachLane(t, func(t *testing.T, lane string) { runKillLoop(t, lane, 20*time.Second, 0) })
}

// runKillLoop runs the kill loop in lane for d, and on until it has killed
// minKills processes, and checks.
func runKillLoop(t *testing.T, lane string, d time.Duration, minKills int) report {
	e := setup(t).inLane(lane)
	c := e.newChecker(t)
	c.allowLate("a relay or worker killed after its confirm, before its mark, has its versions published again")
	l := load{aggregates: 24}
	var extra []string
	if lane == poller.LanePublishFirst {
		// 5 % of the events need their workflow: the kills strike while
		// aggregates go from relays to workflows and back. (In the
		// workflow lane every event takes that path already.)
		l.handoff = 5
		extra = append(extra, c.withHandoffs(t))
	}
	type slot struct {
		role  string
		start func() *child
		proc  *child
	}
	var slots []*slot
	for _, role := range []string{"poller", "poller", "worker", "worker", "consumer", "consumer"} {
		s := &slot{role: role}
		if role == "consumer" {
			s.start = func() *child { return c.startConsumer(t) }
		} else {
			s.start = func() *child { return e.startProcess(t, role, extra...) }
		}
		s.proc = s.start()
		slots = append(slots, s)
	}
	c.waitConsuming(t)
	stop := c.startLoad(l)
	kills := map[string]int{}
	began := time.Now()
	var roles []string // the next victims' roles: each role once per round, in random order
	total := 0
	for time.Since(began) < d || total < minKills {
		time.Sleep(2*time.Second + rand.N(2*time.Second))
		if len(roles) == 0 {
			roles = []string{"poller", "worker", "consumer"}
			rand.Shuffle(len(roles), func(i, j int) { roles[i], roles[j] = roles[j], roles[i] })
		}
		var candidates []*slot
		for _, s := range slots {
			if s.role == roles[0] {
				candidates = append(candidates, s)
			}
		}
		roles = roles[1:]
		s := candidates[rand.IntN(len(candidates))]
		s.proc.kill()
		kills[s.role]++
		total++
		time.Sleep(rand.N(time.Second)) // a supervisor restarts it
		s.proc = s.start()
	}
	took := time.Since(began)
	stop()
	r := c.check(3 * time.Minute)
	handoffs, runPublishes := "", 0
	if l.handoff > 0 {
		var runs int
		require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT party) FROM `+publishjournal.Table+`
			WHERE party LIKE 'run %'`).Scan(&runPublishes, &runs))
		handoffs = fmt.Sprintf("; %d events handed to workflows, %d publishes by %d workflow runs", r.Signals, runPublishes, runs)
	}
	t.Logf("kill loop of %s (%s lane): %d SIGKILLs %v; %d committed, %d lost, %d duplicate copies, %d late copies, %d duplicate signals, %d redeliveries absorbed%s%s; drained %s after the load",
		took.Round(time.Second), lane, total, kills, r.Committed, r.Lost, r.DuplicateCopies, r.LateCopies, r.DuplicateSignals, r.Absorbed,
		r.journalFigures(), handoffs, r.Drained.Round(time.Millisecond))
	if l.handoff > 0 {
		require.Positive(t, runPublishes, "workflow runs published the aggregates handed to them")
	}
	return r
}
