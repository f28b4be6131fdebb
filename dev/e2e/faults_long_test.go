//go:build faults

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
)

// The long fault runs, built only with the faults tag: `make test-faults`
// runs them (go test -tags faults,failpoints -run '^TestLong' ./e2e/). Without the tag
// they are not part of the test binary at all.
//
//	FERRY_FAULTS_DURATION  how long the kill loop runs at least (default 5m)
//	FERRY_FAULTS_KILLS     SIGKILLs the kill loop reaches at least (default 100)
//	FERRY_FAULTS_BACKLOG   events in the backlog (default 100000)

// The kill loop of TestFaultKillLoop, for minutes: at least
// FERRY_FAULTS_DURATION and at least FERRY_FAULTS_KILLS kills (a kill comes
// every 2-4 s and a restart within 1 s, so 100 kills take about 6 minutes),
// in each lane, one after the other.
func TestLongKillLoop(t *testing.T) {
	d := 5 * time.Minute
	if v := os.Getenv("FERRY_FAULTS_DURATION"); v != "" {
		var err error
		d, err = time.ParseDuration(v)
		require.NoError(t, err, "FERRY_FAULTS_DURATION")
	}
	kills := 100
	if v := os.Getenv("FERRY_FAULTS_KILLS"); v != "" {
		var err error
		kills, err = strconv.Atoi(v)
		require.NoError(t, err, "FERRY_FAULTS_KILLS")
	}
	for _, lane := range lanes {
		t.Run(lane, func(t *testing.T) { runKillLoop(t, lane, d, kills) })
	}
}

// The outbox database restarted five times under load, 20 s down each
// time, alternating clean stops (-m fast) and crashes (-m immediate).
func TestLongPostgresRestarts(t *testing.T) {
	for _, lane := range lanes {
		t.Run(lane, func(t *testing.T) {
			runPostgresRestarts(t, lane, []string{"fast", "immediate", "fast", "immediate", "fast"}, 20*time.Second)
		})
	}
}

// The broker restarted three times under load, 30 s down each time.
func TestLongRabbitMQRestarts(t *testing.T) {
	for _, lane := range lanes {
		t.Run(lane, func(t *testing.T) { runRabbitMQRestarts(t, lane, 3, 30*time.Second) })
	}
}

// drainFloor is the drain rate below which the backlog test fails. Measured
// here (2 cores, embedded SQLite Temporal server, 1,000 aggregates): about
// 80 events/s; the floor is a quarter of that, to catch a drain that
// degrades (a claim that stops using the index, a batch that no longer
// fills), not to measure the machine.
const drainFloor = 20.0

// A backlog of FERRY_FAULTS_BACKLOG (100,000) pending events is built while
// the relay cannot deliver (a paused proxy, so the poller keeps claiming,
// failing and backing off against it): in the workflow lane Temporal is
// unreachable for Ferry, in the publish-first lane RabbitMQ is for the
// relay (which needs no Temporal to publish). Then the proxy resumes and
// the backlog drains. Measured: the plan of the claim statement the
// running poller sends (in the workflow lane it must use the partial index
// outbox_events_pending_idx), index and sequential scans during the drain,
// batch sizes and durations, the drain rate, and the peak memory (VmHWM) of
// every process. The checker accounts for every event at the end.
func TestLongBacklog(t *testing.T) {
	for _, lane := range lanes {
		t.Run(lane, func(t *testing.T) { runBacklog(t, lane) })
	}
}

func runBacklog(t *testing.T, lane string) {
	n := 100_000
	if v := os.Getenv("FERRY_FAULTS_BACKLOG"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, "FERRY_FAULTS_BACKLOG")
	}
	const aggregates, lease = 1000, 12 * time.Second
	// A cluster of the test's own: pg_stat_activity shows the first
	// track_activity_query_size bytes of a statement (1 kB by default, a
	// server setting), and the claim statement is longer.
	pg := servers.StartPrivatePostgres(t, "track_activity_query_size=16384")
	e := setupOn(t, ferrytest.NewDB(t, pg.URL), ferrytest.NewBroker(t, "")).inLane(lane)
	c := e.newChecker(t)
	c.noSignals = true
	away := "Temporal"
	proxy := servers.NewProxy(t, temporalAddr)
	viaProxy := "FERRY_TEMPORAL_ADDRESS=" + proxy.Addr()
	workerEnv := viaProxy
	if lane == poller.LanePublishFirst {
		away = "RabbitMQ"
		u, err := url.Parse(e.br.URL)
		require.NoError(t, err)
		proxy = servers.NewProxy(t, u.Host)
		u.Host = proxy.Addr()
		viaProxy, workerEnv = "FERRY_AMQP_URL="+u.String(), "FERRY_LOG_LEVEL=warn"
	}
	procs := map[string]*child{
		"poller":   e.startProcess(t, "poller", viaProxy),
		"worker":   e.startProcess(t, "worker", workerEnv),
		"consumer": c.startConsumer(t),
	}
	c.waitConsuming(t)
	c.runLoad(load{limit: 20})
	waitFor(t, time.Minute, "the warm-up delivered", func() bool { return c.tap.unique() == c.count(committed) })

	proxy.Pause()
	built := time.Now()
	c.bulk(t, n, aggregates)
	buildTook := time.Since(built)
	t.Logf("backlog: %d events over %d aggregates committed in %s (%.0f events/s) while %s was unreachable",
		n, aggregates, buildTook.Round(time.Millisecond), float64(n)/buildTook.Seconds(), away)
	time.Sleep(20 * time.Second) // the poller claims, fails and backs off against the outage meanwhile
	pending := e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'pending'`)
	failedClaims := e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'pending' AND attempts > 0`)
	t.Logf("backlog: %d rows pending, %d of them claimed and released while %s was away (for %s)",
		pending, failedClaims, away, time.Since(built).Round(time.Second))

	// As found (statistics possibly from before the bulk load), then after
	// ANALYZE (what autovacuum would soon give the planner).
	for _, when := range []string{"as found", "after ANALYZE"} {
		if when == "after ANALYZE" {
			_, err := e.db.Pool.Exec(context.Background(), `ANALYZE outbox_events`)
			require.NoError(t, err)
		}
		plan := claimPlan(t, e)
		t.Logf("backlog: EXPLAIN ANALYZE of the claim statement the poller sends (rolled back), %s, with %d rows pending:\n%s", when, pending, plan)
		if lane == poller.LanePublishFirst {
			// The lane's claim keeps only the rows that are their
			// aggregate's next version, which no index orders: it joins
			// every due pending row with its aggregate before it sorts, and
			// with every row of the table pending the planner may rightly
			// read the table instead of the index (seen after ANALYZE).
			continue
		}
		require.Contains(t, plan, "outbox_events_pending_idx", "the claim reads the partial pending index")
	}

	scansBefore := scans(t, e)
	proxy.Resume()
	resumed := time.Now()
	var (
		mu       sync.Mutex
		progress []string
	)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		last := c.tap.unique()
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Minute):
			}
			now := c.tap.unique()
			mu.Lock()
			progress = append(progress, fmt.Sprintf("%s: %d delivered (%d/s in the last minute); VmRSS %s",
				time.Since(resumed).Round(time.Second), now, (now-last)/60, rss(procs)))
			mu.Unlock()
			last = now
		}
	}()
	r := c.check(90 * time.Minute)
	close(stopSampling)
	<-sampled
	drain := r.Drained // from Resume to the last effect and the last row published
	scansAfter := scans(t, e)
	for _, p := range progress {
		t.Logf("backlog drain: %s", p)
	}
	rate := float64(r.Committed) / drain.Seconds()
	t.Logf("backlog: drained %d events in %s: %.0f events/s end to end (tap and effects), %d lost, %d duplicate copies",
		r.Committed, drain.Round(time.Second), rate, r.Lost, r.DuplicateCopies)
	t.Logf("backlog: during the drain the pending index was scanned %d times, outbox_events sequentially %d times",
		scansAfter.pendingIdx-scansBefore.pendingIdx, scansAfter.seq-scansBefore.seq)
	if lane == poller.LanePublishFirst {
		t.Logf("backlog: marks %s", laneMarks(t, e))
	} else {
		t.Logf("backlog: batches %s", batches(t, e, lease))
	}
	t.Logf("backlog: peak memory (VmHWM) %s", hwm(procs))
	for role, p := range procs {
		require.False(t, p.exited(), "the %s survived the backlog", role)
		// Bounded by design, whatever the backlog: a poller holds one batch
		// (at most 200 rows), a worker its activity slots and workflow
		// cache, a consumer its prefetch window. Measured here at 100,000:
		// about 130, 170 and 120 MiB, flat through the drain.
		require.Less(t, procStatus(p.cmd.Process.Pid, "VmHWM"), 256*1024, "peak memory (kB) of the %s", role)
	}
	require.GreaterOrEqual(t, rate, drainFloor, "drain rate (events/s) above the floor")
}

// bulk commits n events (each with its business row) over aggregates
// agg-0 … in transactions of 500, from four writers that never share an
// aggregate (so their version locks never wait on each other).
func (c *checker) bulk(t *testing.T, n, aggregates int) {
	t.Helper()
	const perTx, writers = 500, 4
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			mine := n / writers
			if w < n%writers {
				mine++
			}
			for done := 0; done < mine; done += perTx {
				if err := c.bulkTx(w, writers, min(perTx, mine-done), done, aggregates); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func (c *checker) bulkTx(w, writers, n, offset, aggregates int) error {
	ctx := context.Background()
	evs := make([]outbox.Event, n)
	ids := make([]string, n)
	notes := make([]string, n)
	for i := range n {
		agg := aggID(((offset+i)*writers + w) % aggregates)
		id := uuid.Must(uuid.NewV7())
		evs[i] = outbox.Event{ID: id, AggregateType: c.e.aggType, AggregateID: agg, EventType: "changed", Payload: []byte(`{"bulk":true}`)}
		ids[i], notes[i] = id.String(), agg
	}
	err := pgx.BeginFunc(ctx, c.e.db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, note) SELECT * FROM unnest($1::text[], $2::text[])`, ids, notes); err != nil {
			return err
		}
		_, err := c.e.writer.WriteBatch(ctx, tx, evs)
		return err
	})
	if err != nil {
		return fmt.Errorf("bulk transaction: %w", err)
	}
	for i := range n {
		c.record(ids[i], notes[i], committed)
	}
	return nil
}

// claimPlan finds the claim statement the poller process sent (in
// pg_stat_activity, by its application_name) and EXPLAINs that very text.
func claimPlan(t *testing.T, e *env) string {
	t.Helper()
	ctx := context.Background()
	var query string
	waitFor(t, 2*time.Minute, "the poller's claim statement in pg_stat_activity", func() bool {
		// The claim of pending rows (not the lane's claim of aggregates
		// workflows own, which reads outbox_owners first).
		err := e.db.Pool.QueryRow(ctx, `SELECT query FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE '%FOR UPDATE SKIP LOCKED%' AND query NOT LIKE '%handed_version%' LIMIT 1`, e.db.Schema+"/poller").Scan(&query)
		return err == nil
	})
	// ANALYZE runs the claim, in a transaction that is rolled back: the
	// plan with real row counts and times, and no row claimed.
	tx, err := e.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "PREPARE ferry_claim AS "+query)
	require.NoError(t, err)
	// The poller's parameters: batch size, lease, its name and, when the
	// statement has them, how many more rows of the same aggregates (the
	// workflow lane) or the most versions of one aggregate and rows in all
	// (the publish-first lane's direct claim).
	args := "200, '12 seconds', 'explain'"
	switch {
	case strings.Contains(query, "$5"):
		args += ", 500, 1000"
	case strings.Contains(query, "$4"):
		args += ", 800"
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) EXECUTE ferry_claim(`+args+`)`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "DEALLOCATE ferry_claim")
	require.NoError(t, err)
	return "  " + strings.Join(lines, "\n  ")
}

type scanCounts struct{ pendingIdx, seq int }

func scans(t *testing.T, e *env) scanCounts {
	t.Helper()
	var s scanCounts
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT idx_scan FROM pg_stat_user_indexes WHERE schemaname = current_schema() AND indexrelname = 'outbox_events_pending_idx'),
		(SELECT seq_scan FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = 'outbox_events')`).Scan(&s.pendingIdx, &s.seq))
	return s
}

// batches summarises the claims from the rows: the rows of one claim share
// claimed_by and next_attempt_at (now() + lease of that statement); a batch
// took from its claim to its mark (the latest dispatched_at of its rows).
func batches(t *testing.T, e *env, lease time.Duration) string {
	t.Helper()
	rows, err := e.db.Pool.Query(context.Background(), `SELECT count(*),
		extract(epoch FROM max(coalesce(dispatched_at, published_at)) - (next_attempt_at - $1::interval)) * 1000
		FROM outbox_events WHERE status = 'published' AND claimed_by IS NOT NULL
		GROUP BY claimed_by, next_attempt_at HAVING max(coalesce(dispatched_at, published_at)) IS NOT NULL`, lease)
	require.NoError(t, err)
	type batch struct {
		size int
		ms   float64
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (batch, error) {
		var b batch
		return b, r.Scan(&b.size, &b.ms)
	})
	require.NoError(t, err)
	if len(all) == 0 {
		return "none with a mark"
	}
	sizes := make([]int, len(all))
	ms := make([]float64, len(all))
	for i, b := range all {
		sizes[i], ms[i] = b.size, b.ms
	}
	slices.Sort(sizes)
	slices.Sort(ms)
	q := func(p float64) int { return int(p * float64(len(all)-1)) }
	return fmt.Sprintf("%d claims that marked rows: size p50 %d, max %d; claim to mark p50 %.0fms, p90 %.0fms, p95 %.0fms, p99 %.0fms, max %.0fms",
		len(all), sizes[q(0.5)], sizes[len(sizes)-1], ms[q(0.5)], ms[q(0.9)], ms[q(0.95)], ms[q(0.99)], ms[len(ms)-1])
}

// laneMarks summarises the publish-first lane's marks from the rows: the
// rows one mark statement published share its published_at (now() of the
// statement). A direct claim writes no row, so its time is not on them.
func laneMarks(t *testing.T, e *env) string {
	t.Helper()
	rows, err := e.db.Pool.Query(context.Background(), `SELECT count(*) FROM outbox_events
		WHERE status = 'published' AND owner_epoch IS NOT NULL GROUP BY published_at ORDER BY 1`)
	require.NoError(t, err)
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	if len(sizes) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d mark statements: rows p50 %d, max %d", len(sizes), sizes[len(sizes)/2], sizes[len(sizes)-1])
}

// procStatus reads one field (in kB) of /proc/<pid>/status.
func procStatus(pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	return -1
}

func memOf(procs map[string]*child, field string) string {
	roles := make([]string, 0, len(procs))
	for r := range procs {
		roles = append(roles, r)
	}
	slices.Sort(roles)
	var parts []string
	for _, r := range roles {
		parts = append(parts, fmt.Sprintf("%s %d MiB", r, procStatus(procs[r].cmd.Process.Pid, field)/1024))
	}
	self := procStatus(os.Getpid(), field)
	parts = append(parts, fmt.Sprintf("test process (Temporal server, tap) %d MiB", self/1024))
	return strings.Join(parts, ", ")
}

func rss(procs map[string]*child) string { return memOf(procs, "VmRSS") }
func hwm(procs map[string]*child) string { return memOf(procs, "VmHWM") }
