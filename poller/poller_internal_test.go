package poller

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/internal/testhook"
	"github.com/ferry-outbox/ferry/workflows"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// These tests give the poller a Temporal client aimed at a port where nothing
// listens: every signal fails after SignalTimeout, which is what the failure
// paths need. The success path (Temporal accepts, rows marked dispatched) is
// covered end to end in dev/e2e/.
const testSignalTimeout = 200 * time.Millisecond

// deadTemporal returns a lazy Temporal client for an address nobody listens
// on; it never dials until used, and every call through it fails.
func deadTemporal(t *testing.T) client.Client {
	t.Helper()
	return ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t))
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newPoller builds a poller on pool with a dead Temporal client; cfg's zero
// fields get the test's defaults, then New's.
func newPoller(t *testing.T, pool *pgxpool.Pool, cfg Config) *Poller {
	t.Helper()
	cfg.Pool = pool
	if cfg.Temporal == nil {
		cfg.Temporal = deadTemporal(t)
	}
	if cfg.SignalTimeout == 0 {
		cfg.SignalTimeout = testSignalTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	p, err := New(cfg)
	require.NoError(t, err)
	return p
}

// insertEvent inserts one pending event with plain SQL, as a producer in any
// language would, and returns its id. extra maps more columns to SQL
// expressions, such as next_attempt_at or status.
func insertEvent(t *testing.T, pool *pgxpool.Pool, aggType, aggID string, extra map[string]string) string {
	t.Helper()
	cols := []string{"aggregate_type", "aggregate_id", "event_type", "payload"}
	vals := []string{"$1", "$2", "'test.happened'", `'{"n": 1}'`}
	for col, expr := range extra {
		cols = append(cols, pgx.Identifier{col}.Sanitize())
		vals = append(vals, expr)
	}
	var id string
	err := pool.QueryRow(context.Background(),
		fmt.Sprintf(`INSERT INTO outbox_events (%s) VALUES (%s) RETURNING id::text`,
			strings.Join(cols, ", "), strings.Join(vals, ", ")),
		aggType, aggID).Scan(&id)
	require.NoError(t, err)
	return id
}

type rowState struct {
	AggregateID   string
	Status        string
	Attempts      int
	ClaimedBy     *string
	LastError     *string
	NextAttemptAt time.Time
}

func readRow(t *testing.T, pool *pgxpool.Pool, id string) rowState {
	t.Helper()
	var r rowState
	err := pool.QueryRow(context.Background(), `
		SELECT aggregate_id, status, attempts, claimed_by, last_error, next_attempt_at
		FROM outbox_events WHERE id = $1`, id).
		Scan(&r.AggregateID, &r.Status, &r.Attempts, &r.ClaimedBy, &r.LastError, &r.NextAttemptAt)
	require.NoError(t, err)
	return r
}

// dbNow is PostgreSQL's clock, which the claim and release statements use.
func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now))
	return now
}

func attemptsOf(t *testing.T, pool *pgxpool.Pool, id string) int {
	t.Helper()
	return readRow(t, pool, id).Attempts
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNewRequiresDependencies(t *testing.T) {
	t.Parallel()
	pool := lazyPool(t)
	temporal := deadTemporal(t)

	_, err := New(Config{Temporal: temporal})
	require.ErrorContains(t, err, "Config.Pool")

	_, err = New(Config{Pool: pool})
	require.ErrorContains(t, err, "Config.Temporal")
}

// lazyPool is a pool that never connects: New only checks that it is there.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func TestNewFillsDefaults(t *testing.T) {
	t.Parallel()
	p, err := New(Config{Pool: lazyPool(t), Temporal: deadTemporal(t)})
	require.NoError(t, err)

	c := p.cfg
	require.Equal(t, "ferry", c.TaskQueue)
	require.True(t, strings.HasSuffix(c.Name, fmt.Sprintf("-%d", os.Getpid())), "Name %q is <hostname>-<pid>", c.Name)
	require.Equal(t, 200, c.BatchSize)
	require.Equal(t, 30*time.Second, c.Lease)
	require.Equal(t, 5*time.Second, c.SignalTimeout)
	require.Equal(t, 5*time.Second, c.MarkTimeout)
	require.Equal(t, time.Second, c.PollInterval)
	require.Equal(t, 16, c.Concurrency)
	require.Equal(t, 30*time.Second, c.MaxBackoff)
	require.Equal(t, workflows.DefaultIdleTimeout, c.SignalWindow, "the workers' default idle timeout")
	require.Same(t, slog.Default(), c.Logger)
	require.Equal(t, otel.GetTracerProvider(), c.TracerProvider)
	require.Equal(t, StartOneShot, c.StartMode)
}

func TestNewKeepsExplicitSettings(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	tp := noop.NewTracerProvider()
	p, err := New(Config{
		Pool: lazyPool(t), Temporal: deadTemporal(t),
		TaskQueue: "q", Name: "me", BatchSize: 10000, Lease: 11 * time.Second,
		SignalTimeout: 5 * time.Second, MarkTimeout: 5 * time.Second, PollInterval: 10 * time.Millisecond,
		Concurrency: 1, MaxBackoff: time.Minute, SignalWindow: time.Hour, Logger: logger,
		TracerProvider: tp, StartMode: StartKeepAlive, MaxRefusedAttempts: 2, Lane: LaneWorkflow, Source: "wal",
	})
	require.NoError(t, err)
	require.Equal(t, Config{
		Pool: p.cfg.Pool, Temporal: p.cfg.Temporal,
		TaskQueue: "q", Name: "me", BatchSize: 10000, Lease: 11 * time.Second,
		SignalTimeout: 5 * time.Second, MarkTimeout: 5 * time.Second, PollInterval: 10 * time.Millisecond,
		Concurrency: 1, MaxBackoff: time.Minute, SignalWindow: time.Hour, Logger: logger,
		TracerProvider: tp, StartMode: StartKeepAlive, MaxRefusedAttempts: 2, Lane: LaneWorkflow, Source: "wal",
	}, p.cfg)
}

// The publish-first lane's target is a dependency, like the pool: Validate
// does not ask for it, New does.
func TestNewNeedsTheLaneTarget(t *testing.T) {
	t.Parallel()
	cfg := Config{Lane: LanePublishFirst}
	require.NoError(t, cfg.Validate())
	cfg.Pool, cfg.Temporal = lazyPool(t), deadTemporal(t)
	p, err := New(cfg)
	require.Nil(t, p)
	require.ErrorContains(t, err, "Config.Target is nil")
	require.ErrorContains(t, err, "publish-first")
}

func TestNewRejectsBadSettings(t *testing.T) {
	t.Parallel()
	pool := lazyPool(t)
	temporal := deadTemporal(t)

	tests := []struct {
		name string
		cfg  Config
		want []string // all must appear in the error
	}{
		{"negative batch size", Config{BatchSize: -1}, []string{"Config.BatchSize", "-1"}},
		{"batch size above the limit", Config{BatchSize: 10001}, []string{"Config.BatchSize", "10001"}},
		{"negative concurrency", Config{Concurrency: -1}, []string{"Config.Concurrency", "-1"}},
		{"negative refused attempts", Config{MaxRefusedAttempts: -1}, []string{"Config.MaxRefusedAttempts", "-1"}},
		{"negative signal window", Config{SignalWindow: -time.Second}, []string{"Config.SignalWindow", "-1s"}},
		{"unknown lane", Config{Lane: "fast"}, []string{"Config.Lane", `"fast"`, LaneWorkflow, LanePublishFirst}},
		{
			"lease equal to signal + mark timeout",
			Config{Lease: 10 * time.Second}, // defaults: SignalTimeout 5s + MarkTimeout 5s
			[]string{"Config.Lease", "10s", "SignalTimeout", "MarkTimeout"},
		},
		{
			"lease shorter than signal + mark timeout",
			Config{Lease: 3 * time.Second, SignalTimeout: 2 * time.Second, MarkTimeout: time.Second + time.Millisecond},
			[]string{"Config.Lease", "3s", "SignalTimeout 2s", "MarkTimeout 1.001s"},
		},
		{"negative lease, even when unsafe", Config{Lease: -time.Second, unsafeShortLease: true}, []string{"Config.Lease", "-1s", "positive"}},
		{"poll interval too small", Config{PollInterval: 9 * time.Millisecond}, []string{"Config.PollInterval", "9ms"}},
		{"negative poll interval", Config{PollInterval: -time.Second}, []string{"Config.PollInterval"}},
		{"unknown start mode", Config{StartMode: "eager"}, []string{"Config.StartMode", `"eager"`, StartOneShot, StartKeepAlive}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Validate alone, as a command checks its flags before it
			// dials anything, and New with the dependencies.
			err := tt.cfg.Validate()
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
			cfg := tt.cfg
			cfg.Pool, cfg.Temporal = pool, temporal
			p, err := New(cfg)
			require.Error(t, err)
			require.Nil(t, p)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	require.NoError(t, Config{}.Validate(), "Validate needs no dependencies")

	// Zero means "default", not "invalid".
	p, err := New(Config{Pool: pool, Temporal: temporal, BatchSize: 0, Lease: 0})
	require.NoError(t, err)
	require.Equal(t, 200, p.cfg.BatchSize)
}

// testhook.PollerShortLease (the fault suite's negative control) accepts a lease
// shorter than SignalTimeout + MarkTimeout and lets a signal outlast it: the
// signal runs its full SignalTimeout although the lease ran out long before.
// Without it, such a lease is refused, and signals end by Lease - MarkTimeout.
func TestUnsafeShortLease(t *testing.T) {
	t.Parallel()
	short := Config{Lease: 50 * time.Millisecond, SignalTimeout: testSignalTimeout, MarkTimeout: time.Second}
	require.ErrorContains(t, short.Validate(), "Config.Lease 50ms must exceed")
	short = testhook.AllowShortLease(short)
	require.True(t, short.unsafeShortLease)
	require.NoError(t, short.Validate())

	// A Temporal that accepts connections and never answers: a signal
	// lasts until its deadline.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held sync.WaitGroup
	held.Add(1)
	go func() {
		defer held.Done()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); held.Wait() })
	short.Temporal = ferrytest.LazyTemporal(t, ln.Addr().String())

	db := ferrytest.NewDB(t, "")
	p := newPoller(t, db.Pool, short)
	insertEvent(t, db.Pool, "order", "o-1", nil)
	start := time.Now()
	n, err := p.RunOnce(context.Background())
	require.Equal(t, 1, n)
	require.ErrorContains(t, err, "signal 1 of 1 aggregates")
	require.GreaterOrEqual(t, time.Since(start), testSignalTimeout, "the signal was not cut at the lease")
}

// With Temporal unreachable, every claimed row stays pending: counted at
// claim time, backing off, and saying why.
func TestRunOnceUnreachableTemporalLeavesRowsPending(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	p := newPoller(t, db.Pool, Config{Name: "poller-under-test"})
	ctx := context.Background()

	ids := map[string]string{ // id -> expected workflow id
		insertEvent(t, db.Pool, "order", "o-1", nil):   workflows.WorkflowID("order", "o-1"),
		insertEvent(t, db.Pool, "order", "o-1", nil):   workflows.WorkflowID("order", "o-1"),
		insertEvent(t, db.Pool, "order", "o-2", nil):   workflows.WorkflowID("order", "o-2"),
		insertEvent(t, db.Pool, "invoice", "o-1", nil): workflows.WorkflowID("invoice", "o-1"),
	}

	before := dbNow(t, db.Pool)
	n, err := p.RunOnce(ctx)
	after := dbNow(t, db.Pool)
	require.Equal(t, 4, n)
	require.ErrorContains(t, err, "signal 3 of 3 aggregates")

	for id, wfID := range ids {
		r := readRow(t, db.Pool, id)
		require.Equal(t, "pending", r.Status, "row %s", id)
		require.Equal(t, 1, r.Attempts, "the claim counts the attempt")
		require.NotNil(t, r.ClaimedBy)
		require.Equal(t, "poller-under-test", *r.ClaimedBy)
		require.NotNil(t, r.LastError)
		require.Contains(t, *r.LastError, wfID)
		// Released with the first backoff step (1s), not left to the 30s lease.
		require.False(t, r.NextAttemptAt.Before(before.Add(time.Second)), "next_attempt_at %s, before %s", r.NextAttemptAt, before)
		require.False(t, r.NextAttemptAt.After(after.Add(time.Second)), "next_attempt_at %s, after %s", r.NextAttemptAt, after)
	}

	// Right away, everything is backing off.
	n, err = p.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	for id := range ids {
		require.Equal(t, 1, attemptsOf(t, db.Pool, id))
	}
}

// The release backoff doubles per attempt (1s, 2s, 4s…) and stops at
// MaxBackoff.
func TestRunOnceReleaseBackoffGrowsAndCaps(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	p := newPoller(t, db.Pool, Config{MaxBackoff: time.Minute})

	want := map[string]time.Duration{ // id -> backoff after this claim
		insertEvent(t, db.Pool, "a", "1", map[string]string{"attempts": "0"}):  time.Second,
		insertEvent(t, db.Pool, "a", "2", map[string]string{"attempts": "1"}):  2 * time.Second,
		insertEvent(t, db.Pool, "a", "3", map[string]string{"attempts": "4"}):  16 * time.Second,
		insertEvent(t, db.Pool, "a", "4", map[string]string{"attempts": "9"}):  time.Minute, // 512s, capped
		insertEvent(t, db.Pool, "a", "5", map[string]string{"attempts": "99"}): time.Minute, // exponent capped too
	}
	before := dbNow(t, db.Pool)
	n, err := p.RunOnce(context.Background())
	after := dbNow(t, db.Pool)
	require.Error(t, err)
	require.Equal(t, len(want), n)
	for id, d := range want {
		r := readRow(t, db.Pool, id)
		require.False(t, r.NextAttemptAt.Before(before.Add(d)), "aggregate %s: next_attempt_at %s < %s + %s", r.AggregateID, r.NextAttemptAt, before, d)
		require.False(t, r.NextAttemptAt.After(after.Add(d)), "aggregate %s: next_attempt_at %s > %s + %s", r.AggregateID, r.NextAttemptAt, after, d)
	}
}

func TestRunOnceClaimsOnlyDuePendingRows(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	p := newPoller(t, db.Pool, Config{})

	past := map[string]string{"next_attempt_at": "now() - interval '1 minute'"}
	due := []string{
		insertEvent(t, db.Pool, "due", "1", nil),
		insertEvent(t, db.Pool, "due", "2", past),
	}
	notDue := []string{
		insertEvent(t, db.Pool, "future", "1", map[string]string{"next_attempt_at": "now() + interval '1 minute'"}),
		insertEvent(t, db.Pool, "dispatched", "1", map[string]string{"status": "'dispatched'", "next_attempt_at": "now() - interval '1 minute'"}),
		insertEvent(t, db.Pool, "published", "1", map[string]string{"status": "'published'", "next_attempt_at": "now() - interval '1 minute'"}),
	}

	n, err := p.RunOnce(context.Background())
	require.ErrorContains(t, err, "signal 2 of 2 aggregates")
	require.Equal(t, len(due), n)
	for _, id := range due {
		require.Equal(t, 1, attemptsOf(t, db.Pool, id))
	}
	for _, id := range notDue {
		r := readRow(t, db.Pool, id)
		require.Zero(t, r.Attempts, "aggregate type of %s", id)
		require.Nil(t, r.ClaimedBy)
	}
}

// Oldest next_attempt_at first, at most BatchSize rows per claim, across
// successive claims.
func TestRunOnceClaimsOldestFirstUpToBatchSize(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	p := newPoller(t, db.Pool, Config{BatchSize: 2})

	ago := func(min int) map[string]string {
		return map[string]string{"next_attempt_at": fmt.Sprintf("now() - interval '%d minutes'", min)}
	}
	// Inserted out of order on purpose; ids are random UUIDs anyway.
	byAge := map[int]string{}
	for _, m := range []int{5, 1, 10, 3, 2} {
		byAge[m] = insertEvent(t, db.Pool, "agg", fmt.Sprint(m), ago(m))
	}

	claimedAfter := func() []int {
		var got []int
		for _, m := range []int{10, 5, 3, 2, 1} {
			if attemptsOf(t, db.Pool, byAge[m]) > 0 {
				got = append(got, m)
			}
		}
		return got
	}

	ctx := context.Background()
	n, err := p.RunOnce(ctx)
	require.Error(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []int{10, 5}, claimedAfter())

	// The first two now back off; the next claim takes the next oldest.
	n, err = p.RunOnce(ctx)
	require.Error(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []int{10, 5, 3, 2}, claimedAfter())

	n, err = p.RunOnce(ctx)
	require.Error(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []int{10, 5, 3, 2, 1}, claimedAfter())
	for _, id := range byAge {
		require.Equal(t, 1, attemptsOf(t, db.Pool, id))
	}
}

// Rows another transaction holds locked are skipped, not waited for.
func TestRunOnceSkipsLockedRows(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	p := newPoller(t, db.Pool, Config{})
	ctx := context.Background()

	locked := []string{insertEvent(t, db.Pool, "agg", "locked-1", nil), insertEvent(t, db.Pool, "agg", "locked-2", nil)}
	free := []string{insertEvent(t, db.Pool, "agg", "free-1", nil), insertEvent(t, db.Pool, "agg", "free-2", nil)}

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `SELECT id FROM outbox_events WHERE id = ANY($1::uuid[]) FOR UPDATE`, locked)
	require.NoError(t, err)
	rows.Close()
	require.NoError(t, rows.Err())

	// Blocking on the locks would run into this deadline and claim nothing.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := p.RunOnce(rctx)
	require.NoError(t, rctx.Err(), "RunOnce blocked on the locked rows")
	require.ErrorContains(t, err, "signal 2 of 2 aggregates")
	require.Equal(t, len(free), n)
	for _, id := range free {
		require.Equal(t, 1, attemptsOf(t, db.Pool, id))
	}
	for _, id := range locked {
		require.Zero(t, attemptsOf(t, db.Pool, id))
	}

	// Once the lock is gone the skipped rows are claimable.
	require.NoError(t, tx.Rollback(ctx))
	n, err = p.RunOnce(ctx)
	require.Error(t, err)
	require.Equal(t, len(locked), n)
	for _, id := range locked {
		require.Equal(t, 1, attemptsOf(t, db.Pool, id))
	}
}

// Two pollers (each with a pool of its own, as two processes would) claim
// the same 100 rows at the same moment: every row is claimed exactly once.
func TestConcurrentPollersClaimEachRowOnce(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()

	// 100 rows over 10 aggregates, 10 versions each, in one statement.
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'agg', (i % 10)::text, 'test.happened', jsonb_build_object('i', i)
		FROM generate_series(1, 100) AS i`)
	require.NoError(t, err)

	pool2, err := pgxpool.New(ctx, db.URL)
	require.NoError(t, err)
	defer pool2.Close()
	// Connected pools, so that neither claim waits for a connection while
	// the other one runs.
	require.NoError(t, db.Pool.Ping(ctx))
	require.NoError(t, pool2.Ping(ctx))
	pollers := []*Poller{
		newPoller(t, db.Pool, Config{Name: "poller-1", BatchSize: 100}),
		newPoller(t, pool2, Config{Name: "poller-2", BatchSize: 100}),
	}

	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		claimed = make([]int, len(pollers))
	)
	for i, p := range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			claimed[i], _ = p.RunOnce(ctx) // the signals fail; only the claim matters
		}()
	}
	close(start)
	wg.Wait()
	require.Equal(t, 100, claimed[0]+claimed[1], "claimed per poller: %v", claimed)

	var rows, sum, once, byPollers int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*), sum(attempts), count(*) FILTER (WHERE attempts = 1),
		       count(*) FILTER (WHERE claimed_by IN ('poller-1', 'poller-2'))
		FROM outbox_events`).Scan(&rows, &sum, &once, &byPollers))
	require.Equal(t, 100, rows)
	require.Equal(t, 100, sum)
	require.Equal(t, 100, once)
	require.Equal(t, 100, byPollers)
	for i, p := range pollers {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE claimed_by = $1`, p.cfg.Name).Scan(&n))
		require.Equal(t, claimed[i], n, "rows recorded as claimed by %s", p.cfg.Name)
	}
}

func TestGroup(t *testing.T) {
	t.Parallel()
	ref := func(id string, v int64) workflows.EventRef {
		return workflows.EventRef{ID: id, Version: v, Type: "t." + id}
	}
	row := func(id, typ, agg string, v int64) claimed {
		return claimed{id: id, aggType: typ, aggID: agg, eventType: "t." + id, version: v}
	}
	tests := []struct {
		name  string
		batch []claimed
		want  []aggregateGroup
	}{
		{"empty", nil, nil},
		{
			"one row",
			[]claimed{row("e1", "order", "1", 7)},
			[]aggregateGroup{{aggType: "order", aggID: "1", events: []workflows.EventRef{ref("e1", 7)}, ids: []string{"e1"}}},
		},
		{
			"interleaved aggregates, versions out of order",
			[]claimed{
				row("b2", "order", "B", 2),
				row("a3", "order", "A", 3),
				row("b1", "order", "B", 1),
				row("c1", "invoice", "A", 1), // same id, other type: another aggregate
				row("a1", "order", "A", 1),
				row("a2", "order", "A", 2),
				row("b3", "order", "B", 3),
			},
			[]aggregateGroup{
				{aggType: "order", aggID: "B", events: []workflows.EventRef{ref("b1", 1), ref("b2", 2), ref("b3", 3)}, ids: []string{"b2", "b1", "b3"}},
				{aggType: "order", aggID: "A", events: []workflows.EventRef{ref("a1", 1), ref("a2", 2), ref("a3", 3)}, ids: []string{"a3", "a1", "a2"}},
				{aggType: "invoice", aggID: "A", events: []workflows.EventRef{ref("c1", 1)}, ids: []string{"c1"}},
			},
		},
		{
			// The key must not confuse ("ab","c") with ("a","bc").
			"keys that concatenate alike",
			[]claimed{row("x", "ab", "c", 1), row("y", "a", "bc", 1)},
			[]aggregateGroup{
				{aggType: "ab", aggID: "c", events: []workflows.EventRef{ref("x", 1)}, ids: []string{"x"}},
				{aggType: "a", aggID: "bc", events: []workflows.EventRef{ref("y", 1)}, ids: []string{"y"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := group(tt.batch)
			require.Len(t, got, len(tt.want))
			for i, g := range got {
				w := tt.want[i]
				require.Equal(t, w.aggType, g.aggType, "group %d", i)
				require.Equal(t, w.aggID, g.aggID, "group %d", i)
				require.Equal(t, w.events, g.events, "group %d: events in version order", i)
				// ids only select rows to mark or release: order is irrelevant.
				require.ElementsMatch(t, w.ids, g.ids, "group %d", i)
			}
		})
	}
}

// listenerPool is a pool on db whose connections, the poller's LISTEN
// connection included, carry a unique application_name, so the test can see
// when that poller is listening.
func listenerPool(t *testing.T, db *ferrytest.DB) (*pgxpool.Pool, string) {
	t.Helper()
	name := ferrytest.Name("ferry_poller_test")
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, name
}

func waitListening(t *testing.T, db *ferrytest.DB, appName string) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `
			SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE 'LISTEN %'`, appName).Scan(&n))
		return n == 1
	}, "the poller's LISTEN connection never showed up")
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	// Its own database: the insert's NOTIFY is skipped while another
	// producer of the database holds the coalescing lock (migration 0004),
	// and parallel tests in other schemas of the shared one are producers.
	db := ferrytest.NewOwnDB(t, "")
	pool, appName := listenerPool(t, db)
	// A poll interval far beyond the test's deadlines: only NOTIFY (or the
	// start-up round) can make the loop claim anything in time.
	p := newPoller(t, pool, Config{PollInterval: time.Minute})

	// Start's ctx is only for starting: cancelling it must not stop the loop.
	sctx, scancel := context.WithCancel(context.Background())
	began := time.Now()
	require.NoError(t, p.Start(sctx))
	require.Less(t, time.Since(began), time.Second, "Start returns at once")
	scancel()
	t.Cleanup(p.Stop)

	require.ErrorContains(t, p.Start(context.Background()), "already started")

	waitListening(t, db, appName)
	id := insertEvent(t, db.Pool, "order", "1", nil)
	eventually(t, 5*time.Second, func() bool { return attemptsOf(t, db.Pool, id) == 1 },
		"a row inserted after Start was not attempted")

	p.Stop()
	// Stopped: the LISTEN connection is closed, so a NOTIFY wakes nobody
	// (the poll interval is a minute). That Stop waits for the loop is
	// startstop.Runner's contract, tested there.
	late := insertEvent(t, db.Pool, "order", "2", nil)
	time.Sleep(300 * time.Millisecond)
	require.Zero(t, attemptsOf(t, db.Pool, late), "a stopped poller claimed a row")
	p.Stop() // harmless
}

func TestStopWithoutStart(t *testing.T) {
	t.Parallel()
	p, err := New(Config{Pool: lazyPool(t), Temporal: deadTemporal(t)})
	require.NoError(t, err)
	p.Stop()
	p.Stop()
}

// A row that becomes due while the loop idles is claimed as soon as a NOTIFY
// arrives, with PollInterval a minute away: the listener, not the ticker,
// wakes the loop.
func TestNotifyWakesIdleLoop(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	pool, appName := listenerPool(t, db)
	p := newPoller(t, pool, Config{PollInterval: time.Minute})
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(p.Stop)
	waitListening(t, db, appName)

	// Not yet due: the insert's own NOTIFY wakes the loop, which finds
	// nothing to claim and goes back to waiting for the next wake-up.
	id := insertEvent(t, db.Pool, "order", "1", map[string]string{"next_attempt_at": "now() + interval '300 milliseconds'"})
	due := readRow(t, db.Pool, id).NextAttemptAt
	eventually(t, 5*time.Second, func() bool { return !dbNow(t, db.Pool).Before(due) }, "the row never became due")

	_, err := db.Pool.Exec(context.Background(), `SELECT pg_notify($1, '')`, Channel)
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() bool { return attemptsOf(t, db.Pool, id) == 1 },
		"a NOTIFY did not wake the loop")
}
