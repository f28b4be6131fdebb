package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
)

// The log-tailing relay (--source wal) through the fault suite's checker:
// Ferry's processes, the producers and the checker consumers use a private
// PostgreSQL cluster with wal_level=logical (the shared server runs with
// replica), the shared Temporal server and RabbitMQ. The kill loop, the
// standby's takeover and the crash run in both lanes (inEachLane). The
// burst and the dropped slot tell the stream's rows from the claim's by
// claimed_by, which only the workflow lane's stream leaves empty (the
// publish-first lane claims every row it publishes, streamed or not), so
// they run in the workflow lane.

// walEnv is setup on a private PostgreSQL cluster.
func walEnv(t *testing.T) (*env, *servers.PrivatePostgres) {
	t.Helper()
	pg := servers.StartPrivatePostgres(t)
	db := ferrytest.NewDB(t, pg.URL)
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE orders (id text PRIMARY KEY, note text NOT NULL)`)
	require.NoError(t, err)
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	return &env{db: db, br: ferrytest.NewBroker(t, ""), taskQueue: ferrytest.Name("tq"), aggType: ferrytest.Name("order"), writer: w}, pg
}

// walProcess runs `ferry <sub> --source wal`; name tells its replication
// connection apart in pg_stat_replication (application_name).
func (e *env) walProcess(t *testing.T, sub, name string, extraEnv ...string) *child {
	t.Helper()
	return e.startProcess(t, sub, append([]string{
		"FERRY_SOURCE=wal",
		"FERRY_POSTGRES_URL=" + withParam(e.db.URL, "application_name", e.db.Schema+"/"+name),
	}, extraEnv...)...)
}

// streamed counts the rows the stream delivered: the claim pass sets
// claimed_by, the stream never does.
func (e *env) streamed(t *testing.T) (stream, claimed int) {
	t.Helper()
	return e.count(t, `SELECT count(*) FROM outbox_events WHERE claimed_by IS NULL`),
		e.count(t, `SELECT count(*) FROM outbox_events WHERE claimed_by IS NOT NULL`)
}

// A burst with 10% rolled back, 5% cut off before COMMIT, and three
// long-running transactions opened before it and committed during and after
// it (a late committer's row arrives after later commits): none lost, none
// unexpected, order per aggregate held.
func TestWALBurstWithRollbacksAndLongTransactions(t *testing.T) {
	t.Parallel()
	e, _ := walEnv(t)
	c := e.newChecker(t)
	e.walProcess(t, "run", "run")
	c.startConsumer(t)
	c.waitConsuming(t)
	// The relay created the slot at start; the held transactions open after.
	waitFor(t, time.Minute, "the replication slot streamed", func() bool {
		return e.count(t, `SELECT count(*) FROM pg_replication_slots WHERE active`) == 1
	})
	var commits []func()
	// Aggregates of their own: a held insert locks its aggregate's counter
	// row, and the load's producers would queue behind it.
	for _, agg := range []string{"held-0", "held-1", "held-2"} {
		_, commit := c.hold(agg)
		commits = append(commits, commit)
	}
	stop := c.startLoad(load{producers: 4, aggregates: 12, pause: 10 * time.Millisecond, rollback: 10, crash: 5})
	time.Sleep(3 * time.Second)
	commits[0]()
	time.Sleep(3 * time.Second)
	stop()
	commits[1]()
	commits[2]()
	r := c.check(2 * time.Minute)
	stream, claimed := e.streamed(t)
	t.Logf("wal burst: %d attempted, %d committed, %d rolled back, %d cut off, 3 long transactions; %d rows delivered by the stream, %d by the catch-up claim; %d duplicate signals, %d duplicate copies",
		r.Attempted, r.Committed, r.RolledBack, r.Crashed, stream, claimed, r.DuplicateSignals, r.DuplicateCopies)
	// The load runs for its 6 s, not to a count: 520–721 commits when the
	// test runs alone here, 279 inside the whole suite with a CPU busy loop
	// beside it.
	require.Greater(t, r.Committed, 100, "a burst")
	require.Greater(t, stream, claimed, "the stream, not the claim, delivered the burst")
}

// Two `ferry poller --source wal` processes (one streams, one waits as a
// standby) and a worker; every 2-4s the poller that streams is SIGKILLed
// and restarted within a second, for 20s under load: the standby takes
// over, the restarted one becomes the standby, and the checker accounts for
// every event.
func TestWALRelayKillLoop(t *testing.T) {
	t.Parallel()
	inEachLane(t, runWALRelayKillLoop)
}

func runWALRelayKillLoop(t *testing.T, lane string) {
	e, _ := walEnv(t)
	e.inLane(lane)
	c := e.newChecker(t)
	c.allowLate("a relay killed after its confirm, before its mark, has its versions published again")
	e.startProcess(t, "worker")
	pollers := map[string]*child{}
	for _, name := range []string{"wal-a", "wal-b"} {
		pollers[name] = e.walProcess(t, "poller", name)
	}
	c.startConsumer(t)
	c.waitConsuming(t)
	stop := c.startLoad(load{aggregates: 24})
	kills := 0
	var takeovers []time.Duration
	began := time.Now()
	for time.Since(began) < 20*time.Second {
		time.Sleep(2*time.Second + rand.N(2*time.Second))
		name := e.activeWALRelay(t, time.Minute)
		killed := time.Now()
		pollers[name].kill()
		kills++
		time.Sleep(rand.N(time.Second)) // a supervisor restarts it
		pollers[name] = e.walProcess(t, "poller", name)
		waitFor(t, time.Minute, "a relay streaming again", func() bool { return e.activeName(t) != "" })
		takeovers = append(takeovers, time.Since(killed))
	}
	stop()
	r := c.check(3 * time.Minute)
	t.Logf("WAL relay kill loop: %d SIGKILLs of the streaming relay in 20s; slot streamed again after %v; %d committed, %d lost, %d duplicate signals, %d duplicate copies, %d late copies",
		kills, roundAll(takeovers), r.Committed, r.Lost, r.DuplicateSignals, r.DuplicateCopies, r.LateCopies)
	require.GreaterOrEqual(t, kills, 4)
}

// activeName is the application_name suffix of the relay that streams from
// the slot now, or "".
func (e *env) activeName(t *testing.T) string {
	t.Helper()
	var name string
	err := e.db.Pool.QueryRow(context.Background(), `SELECT split_part(a.application_name, '/', 2)
		FROM pg_replication_slots s JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.active`).Scan(&name)
	if err != nil { // no row, or PostgreSQL restarting
		return ""
	}
	return name
}

func (e *env) activeWALRelay(t *testing.T, timeout time.Duration) string {
	t.Helper()
	var name string
	waitFor(t, timeout, "a relay streaming from the slot", func() bool { name = e.activeName(t); return name != "" })
	return name
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}

// The standby takes over when the streaming relay is SIGKILLed under load:
// measured from the kill to the slot streaming again, and to the first
// event committed after the kill reaching RabbitMQ.
func TestWALStandbyTakeover(t *testing.T) {
	t.Parallel()
	inEachLane(t, runWALStandbyTakeover)
}

func runWALStandbyTakeover(t *testing.T, lane string) {
	e, _ := walEnv(t)
	e.inLane(lane)
	c := e.newChecker(t)
	c.allowLate("the relay killed mid-stream may have published versions it never marked")
	e.startProcess(t, "worker")
	pollers := map[string]*child{}
	for _, name := range []string{"wal-a", "wal-b"} {
		pollers[name] = e.walProcess(t, "poller", name, "FERRY_LOG_LEVEL=info")
	}
	c.startConsumer(t)
	c.waitConsuming(t)
	stop := c.startLoad(load{})
	waitFor(t, time.Minute, "deliveries", func() bool { return c.tap.unique() > 20 })
	active := e.activeWALRelay(t, time.Minute)
	standby := "wal-a"
	if active == standby {
		standby = "wal-b"
	}
	require.Contains(t, pollers[standby].out.String(), "waiting as a standby")

	killed := time.Now()
	pollers[active].kill()
	waitFor(t, time.Minute, "the standby streaming", func() bool { return e.activeName(t) == standby })
	slotTaken := time.Since(killed)
	after := c.transact(aggID(rand.IntN(12)), committed)
	committedAt := time.Now()
	waitFor(t, time.Minute, "an event committed after the kill delivered", func() bool {
		c.tap.mu.Lock()
		defer c.tap.mu.Unlock()
		return c.tap.seen[after]
	})
	firstDelivery := time.Since(committedAt)
	stop()
	r := c.check(2 * time.Minute)
	waited := regexp.MustCompile(`took over the replication slot.*waited_as_standby=(\S+)`).FindStringSubmatch(pollers[standby].out.String())
	require.NotNil(t, waited, "the standby logged its takeover:\n%s", pollers[standby].out.String())
	t.Logf("standby takeover: the slot streamed again %s after the SIGKILL (standby retries every 1s); an event committed then reached RabbitMQ %s later; the standby waited %s in all; %d committed, %d lost",
		slotTaken.Round(time.Millisecond), firstDelivery.Round(time.Millisecond), waited[1], r.Committed, r.Lost)
	require.Less(t, slotTaken, 10*time.Second)
}

// The private PostgreSQL is stopped (immediate: a crash) under load and
// started again 3s later: producers fail meanwhile, the stream reconnects
// and resumes after its last confirmed transaction.
func TestWALPostgresRestart(t *testing.T) {
	t.Parallel()
	inEachLane(t, runWALPostgresRestart)
}

func runWALPostgresRestart(t *testing.T, lane string) {
	e, pg := walEnv(t)
	e.inLane(lane)
	c := e.newChecker(t)
	c.allowLate("marks lost to the crash leave confirmed rows to be published again")
	relay := e.walProcess(t, "run", "run", "FERRY_LOG_LEVEL=info")
	c.startConsumer(t)
	c.waitConsuming(t)
	e.activeWALRelay(t, time.Minute) // the slot exists: the load is streamed
	stop := c.startLoad(load{})
	waitFor(t, time.Minute, "deliveries before the crash", func() bool { return c.tap.unique() > 20 })
	before := c.tap.unique()
	pg.Stop(t, "immediate")
	crashed := time.Now()
	time.Sleep(3 * time.Second)
	pg.Start(t)
	down := time.Since(crashed)
	waitFor(t, 2*time.Minute, "the stream streaming again", func() bool { return e.activeName(t) == "run" })
	resumed := time.Since(crashed)
	time.Sleep(3 * time.Second) // load after the restart
	stop()
	r := c.check(3 * time.Minute)
	by := "" // which rows the stream delivered, in the lane whose stream leaves claimed_by empty
	if lane == poller.LaneWorkflow {
		stream, claimed := e.streamed(t)
		by = fmt.Sprintf("; %d rows by the stream, %d by the claim pass", stream, claimed)
	}
	t.Logf("PostgreSQL crashed and restarted (down %s; %d delivered before); the relay streamed again %s after the crash; %d committed, %d unknown outcomes (%d committed), %d lost, %d late copies%s; drained %s after the load%s",
		down.Round(100*time.Millisecond), before, resumed.Round(100*time.Millisecond), r.Committed, r.Unknown, r.UnknownCommitted, r.Lost,
		r.LateCopies, r.journalFigures(), r.Drained.Round(100*time.Millisecond), by)
	for _, l := range strings.Split(relay.out.String(), "\n") {
		if strings.Contains(l, "component=walrelay") {
			t.Log(l)
		}
	}
}

// The slot dropped behind Ferry's back: its walsender terminated and the
// slot dropped while a transaction is open, so the relay's re-creation
// waits for it and the events committed meanwhile are in no stream. The
// relay logs a clear error, and the catch-up pass it runs after recreating
// the slot delivers them.
func TestWALSlotDroppedBehindFerrysBack(t *testing.T) {
	t.Parallel()
	e, pg := walEnv(t)
	c := e.newChecker(t)
	relay := e.walProcess(t, "run", "run")
	c.startConsumer(t)
	c.waitConsuming(t)
	c.runLoad(load{limit: 30})
	e.activeWALRelay(t, time.Minute)

	_, commitBlocker := c.hold("blocker")
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pg.URL)
	require.NoError(t, err)
	defer admin.Close(ctx)
	dropped := false
	for range 500 {
		_, _ = admin.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active`)
		if _, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot('ferry_outbox')`); err == nil {
			dropped = true
			break
		}
	}
	require.True(t, dropped, "dropped the slot")
	c.mu.Lock()
	earlier := map[string]bool{}
	for id := range c.attempts {
		earlier[id] = true
	}
	c.mu.Unlock()
	c.runLoad(load{limit: 30}) // while the slot is gone
	c.mu.Lock()
	var gap []string
	for id, a := range c.attempts {
		if a.outcome == committed && !earlier[id] {
			gap = append(gap, id)
		}
	}
	c.mu.Unlock()
	waitFor(t, time.Minute, "the relay's error", func() bool {
		return strings.Contains(relay.out.String(), "dropped behind Ferry's back")
	})
	commitBlocker()
	c.runLoad(load{limit: 30}) // after the slot is back
	r := c.check(2 * time.Minute)
	gapClaimed := e.count(t, `SELECT count(*) FROM outbox_events WHERE claimed_by IS NOT NULL AND id = ANY($1::uuid[])`, gap)
	stream, claimed := e.streamed(t)
	line := relay.out.String()
	if i := strings.Index(line, "dropped behind Ferry's back"); i >= 0 {
		line = line[max(0, strings.LastIndex(line[:i], "\n")+1):]
		line, _, _ = strings.Cut(line, "\n")
	}
	t.Logf("slot dropped: %d events committed while it was gone, %d of them delivered by the catch-up claim; %d committed in all, %d rows by the stream, %d by the claim pass; the relay said: %s",
		len(gap), gapClaimed, r.Committed, stream, claimed, line)
	require.Positive(t, gapClaimed, "the catch-up pass delivered events committed while the slot was gone")
}

// The operator's side of --source wal: against the shared server
// (wal_level=replica) `ferry poller --source wal` exits with what to fix; a
// bad slot name is refused before anything is dialled; `ferry status`
// shows the slot streaming, then left behind with the commands to run;
// `ferry wal drop-slot` refuses while a relay streams, then drops the slot
// and the publication.
func TestWALCommands(t *testing.T) {
	t.Parallel()
	shared := ferrytest.NewDB(t, "")
	temporal := []string{"FERRY_TEMPORAL_ADDRESS=" + temporalAddr, "FERRY_TEMPORAL_NAMESPACE=" + namespace}
	code, out := ferry(t, append([]string{"FERRY_POSTGRES_URL=" + shared.URL}, temporal...), "poller", "--source", "wal")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `wal_level is not logical: it is "replica"`)
	require.Contains(t, out, "ALTER SYSTEM SET wal_level = logical")
	require.Contains(t, out, "set --source (FERRY_SOURCE) to poll")
	code, out = ferry(t, []string{"FERRY_POSTGRES_URL=" + shared.URL}, "poller", "--source", "wal", "--wal-slot", "Ferry-Slot")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `--wal-slot (FERRY_WAL_SLOT) "Ferry-Slot"`)

	e, _ := walEnv(t)
	env := append([]string{"FERRY_POSTGRES_URL=" + e.db.URL, "FERRY_TASK_QUEUE=" + e.taskQueue}, temporal...)
	relay := e.walProcess(t, "poller", "wal")
	e.activeWALRelay(t, time.Minute)
	code, out = ferry(t, env, "status")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "Log tailing (replication slot ferry_outbox)")
	require.Contains(t, out, "streaming (walsender PID")
	code, out = ferry(t, env, "wal", "drop-slot")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "stop the WAL relays")

	relay.kill()
	waitFor(t, time.Minute, "the slot released", func() bool { return e.activeName(t) == "" })
	code, out = ferry(t, env, "status")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "nobody streams from it")
	require.Contains(t, out, "ferry wal drop-slot --wal-slot ferry_outbox")
	code, out = ferry(t, env, "wal", "drop-slot")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `replication slot "ferry_outbox": dropped; publication "ferry_outbox": dropped`)
	code, out = ferry(t, env, "status")
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "Log tailing")
}
