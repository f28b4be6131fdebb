package walrelay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/walrelay"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// These tests run the stream against a private PostgreSQL with
// wal_level=logical and a recording dispatcher in place of Temporal; the
// same paths through real Temporal, with the fault suite's checker, are in
// dev/e2e/wal_test.go.

// recorder stands in for *poller.Poller: it records what the stream
// dispatched, refuses it while refuse is set, marks rows with the
// poller's own statement and counts the catch-up passes.
type recorder struct {
	marker *poller.Poller // MarkDispatched only (its Temporal is dead)
	refuse atomic.Bool
	// invalid: events of this aggregate id are refused as invalid
	// (InvalidArgument), as Temporal refuses a request that can never
	// succeed.
	invalid string

	mu      sync.Mutex
	got     []poller.Event
	drains  int
	drainAt []time.Time
	pending []string // ids pending at the last catch-up pass
	// pendingAt are the ids pending at each catch-up pass.
	pendingAt [][]string
	pool      *pgxpool.Pool
	// checkVisible: Dispatch looks the events' rows up, as a workflow's
	// publish would, and keeps the ids it could not see in invisible.
	checkVisible bool
	invisible    []string
}

func (r *recorder) Dispatch(ctx context.Context, events []poller.Event) ([]string, []poller.Failure) {
	if r.refuse.Load() {
		ids := make([]string, len(events))
		for i, e := range events {
			ids[i] = e.ID
		}
		return nil, []poller.Failure{{WorkflowID: "all", IDs: ids, Err: errors.New("refused by the test")}}
	}
	var seen map[string]bool
	if r.checkVisible {
		all := make([]string, len(events))
		for i, e := range events {
			all[i] = e.ID
		}
		var err error
		if seen, err = visibleIDs(ctx, r.pool, all); err != nil {
			return nil, []poller.Failure{{WorkflowID: "all", IDs: all, Err: err}}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids, invalid []string
	for _, e := range events {
		if r.checkVisible && !seen[strings.ToLower(e.ID)] {
			r.invisible = append(r.invisible, e.ID)
		}
		if e.AggregateID == r.invalid && r.invalid != "" {
			invalid = append(invalid, e.ID)
			continue
		}
		r.got = append(r.got, e)
		ids = append(ids, e.ID)
	}
	if len(invalid) > 0 {
		return ids, []poller.Failure{{WorkflowID: "ferry/order/" + r.invalid, IDs: invalid,
			Err: fmt.Errorf("signal-with-start: %w", serviceerror.NewInvalidArgument("refused by the test"))}}
	}
	return ids, nil
}

func (r *recorder) MarkDispatched(ctx context.Context, ids []string) error {
	return r.marker.MarkDispatched(ctx, ids)
}

func (r *recorder) Drain(ctx context.Context) (int, error) {
	rows, err := r.pool.Query(ctx, `SELECT id::text FROM outbox_events WHERE status = 'pending'`)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drains++
	r.drainAt = append(r.drainAt, time.Now())
	r.pending = ids
	r.pendingAt = append(r.pendingAt, ids)
	return 0, nil
}

// The recorder runs the workflow lane and joins no registry.
func (r *recorder) Lane() string                    { return poller.LaneWorkflow }
func (r *recorder) JoinFleet(context.Context) error { return nil }
func (r *recorder) LeaveFleet()                     {}
func (r *recorder) ServeOwned(context.Context)      {}
func (r *recorder) RelayAggregates(context.Context, []relaydb.AggregateKey) (int, error) {
	return 0, errors.New("the recorder runs the workflow lane")
}

func (r *recorder) events() []poller.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *recorder) invisibleAtDispatch() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.invisible)
}

func (r *recorder) ids() map[string]int {
	out := map[string]int{}
	for _, e := range r.events() {
		out[e.ID]++
	}
	return out
}

type bundle struct {
	pg  *servers.PrivatePostgres
	db  *ferrytest.DB
	rec *recorder
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t)
}

// setupWith is setup on a private PostgreSQL with more settings.
func setupWith(t *testing.T, settings ...string) *bundle {
	t.Helper()
	pg := servers.StartPrivatePostgres(t, settings...)
	db := ferrytest.NewDB(t, pg.URL)
	marker, err := poller.New(poller.Config{Pool: db.Pool, Temporal: ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t))})
	require.NoError(t, err)
	return &bundle{pg: pg, db: db, rec: &recorder{marker: marker, pool: db.Pool}}
}

// relay starts a relay on b's outbox; stopped at cleanup.
func (b *bundle) relay(t *testing.T, cfg walrelay.Config) *walrelay.Relay {
	t.Helper()
	cfg.Pool = b.db.Pool
	if cfg.Poller == nil {
		cfg.Poller = b.rec
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	cfg.StatusInterval = cmpOr(cfg.StatusInterval, 200*time.Millisecond)
	cfg.StandbyRetry = cmpOr(cfg.StandbyRetry, 100*time.Millisecond)
	cfg.MaxBackoff = cmpOr(cfg.MaxBackoff, 500*time.Millisecond)
	r, err := walrelay.New(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	return r
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// insert commits one event per aggregate id in one transaction, or rolls
// it back; it returns the ids.
func (b *bundle) insert(t *testing.T, rollback bool, aggs ...string) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	ids := b.insertIn(t, tx, aggs...)
	if rollback {
		require.NoError(t, tx.Rollback(ctx))
	} else {
		require.NoError(t, tx.Commit(ctx))
	}
	return ids
}

func (b *bundle) insertIn(t *testing.T, tx pgx.Tx, aggs ...string) []string {
	t.Helper()
	var ids []string
	for _, a := range aggs {
		var id string
		require.NoError(t, tx.QueryRow(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', $1, 'changed', '{"n": 1}') RETURNING id::text`, a).Scan(&id))
		ids = append(ids, id)
	}
	return ids
}

func (b *bundle) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), q, args...).Scan(&n))
	return n
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Committed inserts are streamed in commit order, each once; rolled-back
// ones never; a transaction opened first and committed last arrives last;
// every streamed row is marked dispatched, and the slot's confirmed
// position moves past them.
func TestStreamsCommittedInsertsInCommitOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.relay(t, walrelay.Config{})
	ctx := context.Background()

	late, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer late.Rollback(ctx)
	lateIDs := b.insertIn(t, late, "late")

	var want []string
	rolledBack := map[string]bool{}
	for i := range 50 {
		ids := b.insert(t, i%10 == 3, fmt.Sprintf("a%d", i%5), fmt.Sprintf("b%d", i%7))
		if i%10 == 3 {
			for _, id := range ids {
				rolledBack[id] = true
			}
			continue
		}
		want = append(want, ids...)
	}
	require.NoError(t, late.Commit(ctx))
	want = append(want, lateIDs...)

	waitFor(t, 30*time.Second, "every committed event streamed", func() bool { return len(b.rec.ids()) >= len(want) })
	var got []string
	for _, e := range b.rec.events() {
		got = append(got, e.ID)
		require.False(t, rolledBack[e.ID], "a rolled-back insert was streamed")
	}
	require.Equal(t, want, got, "each committed event once, in commit order (the late committer last)")
	waitFor(t, 30*time.Second, "streamed rows marked dispatched", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched'`) == len(want)
	})
	waitFor(t, 10*time.Second, "the slot confirmed past them", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_replication_slots
			WHERE slot_name = 'ferry_outbox' AND confirmed_flush_lsn >= pg_current_wal_insert_lsn() - 100000`) == 1
	})
	require.Zero(t, b.count(t, `SELECT count(*) FROM outbox_events WHERE claimed_by IS NOT NULL`), "the stream claims nothing")
}

// While Temporal refuses, the stream holds its position; a relay stopped
// then and a new one started replays the refused transactions; nothing
// confirmed is replayed.
func TestRefusedEventsAreReplayedAfterRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r1 := b.relay(t, walrelay.Config{})
	first := b.insert(t, false, "a", "b")
	waitFor(t, 30*time.Second, "the first transaction streamed", func() bool { return len(b.rec.ids()) == 2 })
	waitFor(t, 10*time.Second, "its position confirmed", func() bool {
		s, err := walrelay.ReadSlotStats(context.Background(), b.db.Pool, walrelay.DefaultSlot)
		require.NoError(t, err)
		return s.LagBytes < 10000
	})

	b.rec.refuse.Store(true)
	second := b.insert(t, false, "a", "c")
	time.Sleep(time.Second) // refused, retried, refused
	r1.Stop()
	require.Equal(t, 2, len(b.rec.ids()), "nothing of the refused transaction was recorded")
	b.rec.refuse.Store(false)

	b.relay(t, walrelay.Config{})
	waitFor(t, 30*time.Second, "the refused transaction replayed", func() bool { return len(b.rec.ids()) == 4 })
	ids := b.rec.ids()
	for _, id := range append(first, second...) {
		require.Equal(t, 1, ids[id], "event %s dispatched once by the stream", id)
	}
}

// A second relay waits as a standby while the first streams, and takes the
// slot over when the first stops (its connection ends).
func TestStandbyTakesOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	active := b.relay(t, walrelay.Config{})
	b.insert(t, false, "a")
	waitFor(t, 30*time.Second, "the active relay streams", func() bool { return len(b.rec.ids()) == 1 })

	standbyRec := &recorder{marker: b.rec.marker, pool: b.db.Pool}
	standby := b.relay(t, walrelay.Config{Poller: standbyRec})
	time.Sleep(500 * time.Millisecond)
	b.insert(t, false, "b")
	waitFor(t, 30*time.Second, "the active relay streams on", func() bool { return len(b.rec.ids()) == 2 })
	require.Empty(t, standbyRec.events(), "the standby streams nothing while the slot is taken")

	stopped := time.Now()
	active.Stop()
	b.insert(t, false, "c")
	waitFor(t, 30*time.Second, "the standby streams", func() bool { return len(standbyRec.ids()) == 1 })
	took := time.Since(stopped)
	t.Logf("standby took over %s after the active relay stopped (its own wait: %s, retry every 100ms)",
		took.Round(time.Millisecond), standby.LastTakeover().Round(time.Millisecond))
	require.Positive(t, standby.LastTakeover())
	require.Less(t, took, 5*time.Second)
}

// With nothing to relay and other tables and another database busy, the
// slot's confirmed position follows the server's WAL (the relay confirms
// what keepalives report when it holds nothing): a quiet outbox does not
// pin WAL, with no heartbeat writes.
func TestQuietOutboxDoesNotPinWAL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.relay(t, walrelay.Config{})
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `CREATE TABLE busy (id bigserial PRIMARY KEY, filler text)`)
	require.NoError(t, err)
	var written int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&written))
	// Half in another table of this database, half in another database of
	// the cluster (WAL is the cluster's; the slot decodes this database's).
	_, err = b.db.Pool.Exec(ctx, `CREATE DATABASE elsewhere`)
	require.NoError(t, err)
	other, err := pgx.Connect(ctx, strings.TrimSuffix(b.pg.URL, "/postgres")+"/elsewhere")
	require.NoError(t, err)
	defer other.Close(ctx)
	_, err = other.Exec(ctx, `CREATE TABLE busy (id bigserial PRIMARY KEY, filler text)`)
	require.NoError(t, err)
	for range 10 {
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO busy (filler) SELECT repeat('x', 1000) FROM generate_series(1, 500)`)
		require.NoError(t, err)
		_, err = other.Exec(ctx, `INSERT INTO busy (filler) SELECT repeat('x', 1000) FROM generate_series(1, 500)`)
		require.NoError(t, err)
	}
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn - $1`, written).Scan(&written))
	waitFor(t, 30*time.Second, "the confirmed position to follow the busy table's WAL", func() bool {
		s, err := walrelay.ReadSlotStats(ctx, b.db.Pool, walrelay.DefaultSlot)
		require.NoError(t, err)
		return s.LagBytes < 1<<20
	})
	lagged := time.Now()
	// restart_lsn follows the confirmed position at the next running-xacts
	// record, which PostgreSQL writes every 15s.
	var s walrelay.SlotStats
	waitFor(t, 60*time.Second, "the retained WAL released", func() bool {
		s, err = walrelay.ReadSlotStats(ctx, b.db.Pool, walrelay.DefaultSlot)
		require.NoError(t, err)
		return s.RetainedBytes < 1<<20
	})
	t.Logf("after %d MB of WAL on another table and in another database, and none in the outbox: slot lag %d bytes; retained WAL under 1 MB (%d bytes) %s later",
		written>>20, s.LagBytes, s.RetainedBytes, time.Since(lagged).Round(time.Second))
}

// The slot dropped behind Ferry's back (its walsender terminated, then the
// slot dropped): the relay says so, recreates it and runs a catch-up pass,
// which finds the rows committed while it was gone.
func TestSlotDroppedBehindFerrysBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var logs ferrytest.Buffer
	b.relay(t, walrelay.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	b.insert(t, false, "a")
	waitFor(t, 30*time.Second, "streaming", func() bool { return len(b.rec.ids()) == 1 })
	b.rec.mu.Lock()
	drainsBefore := b.rec.drains
	b.rec.mu.Unlock()

	ctx := context.Background()
	admin, err := pgx.Connect(ctx, b.pg.URL)
	require.NoError(t, err)
	defer admin.Close(ctx)
	// Many tries: the relay reconnects at once, so the slot is free only
	// for a moment after its walsender ends.
	dropped := false
	for range 200 {
		_, _ = admin.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'ferry_outbox' AND active`)
		if _, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot('ferry_outbox')`); err == nil {
			dropped = true
			break
		}
	}
	require.True(t, dropped, "dropped the slot")
	gap := b.insert(t, false, "gap1", "gap2")

	waitFor(t, 30*time.Second, "the relay's error", func() bool {
		return strings.Contains(logs.String(), "dropped behind Ferry's back")
	})
	waitFor(t, 30*time.Second, "the slot recreated", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'ferry_outbox'`) == 1
	})
	waitFor(t, 30*time.Second, "a catch-up pass after it", func() bool {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return b.rec.drains > drainsBefore
	})
	b.rec.mu.Lock()
	pending := slices.Clone(b.rec.pending)
	b.rec.mu.Unlock()
	for _, id := range gap {
		require.Contains(t, pending, id, "the catch-up pass sees the row the stream cannot deliver")
	}
	after := b.insert(t, false, "after")
	waitFor(t, 30*time.Second, "the recreated slot streams", func() bool { return b.rec.ids()[after[0]] == 1 })
}

// What a user gets wrong is named, with the fix.
func TestMisconfigurationErrors(t *testing.T) {
	t.Parallel()
	t.Run("wal_level replica", func(t *testing.T) {
		t.Parallel()
		pg := servers.StartPrivatePostgres(t, "wal_level=replica")
		db := ferrytest.NewDB(t, pg.URL)
		err := startErr(t, db.Pool, walrelay.Config{})
		require.ErrorIs(t, err, walrelay.ErrWALLevel)
		require.ErrorContains(t, err, `it is "replica"`)
		require.ErrorContains(t, err, "set Config.Source to poll")
	})
	t.Run("no REPLICATION attribute, publication missing the table, slots used up", func(t *testing.T) {
		t.Parallel()
		pg := servers.StartPrivatePostgres(t, "max_replication_slots=1")
		db := ferrytest.NewDB(t, pg.URL)
		ctx := context.Background()
		_, err := db.Pool.Exec(ctx, `CREATE ROLE app LOGIN; GRANT ALL ON SCHEMA `+pgx.Identifier{db.Schema}.Sanitize()+` TO app`)
		require.NoError(t, err)
		cfg, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		cfg.ConnConfig.User = "app"
		appPool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer appPool.Close()
		err = startErr(t, appPool, walrelay.Config{})
		require.ErrorIs(t, err, walrelay.ErrNoReplicationPrivilege)
		require.ErrorContains(t, err, `ALTER ROLE "app" REPLICATION`)

		_, err = db.Pool.Exec(ctx, `CREATE TABLE other (id int); CREATE PUBLICATION theirs FOR TABLE other`)
		require.NoError(t, err)
		err = startErr(t, db.Pool, walrelay.Config{Publication: "theirs"})
		require.ErrorIs(t, err, walrelay.ErrPublicationMissingTable)
		require.ErrorContains(t, err, `ALTER PUBLICATION "theirs" ADD TABLE outbox_events`)

		_, err = db.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot('someone_elses', 'pgoutput')`)
		require.NoError(t, err)
		err = startErr(t, db.Pool, walrelay.Config{})
		require.ErrorIs(t, err, walrelay.ErrSlotLimit)
		require.ErrorContains(t, err, "max_replication_slots = 1")
	})
}

func startErr(t *testing.T, pool *pgxpool.Pool, cfg walrelay.Config) error {
	t.Helper()
	cfg.Pool = pool
	cfg.Poller = &recorder{pool: pool}
	cfg.Logger = slog.New(slog.DiscardHandler)
	r, err := walrelay.New(cfg)
	require.NoError(t, err)
	err = r.Start(context.Background())
	require.Error(t, err)
	r.Stop()
	t.Logf("%v", err)
	return err
}

// DropSlot refuses while a relay streams, then drops slot and publication.
func TestDropSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.relay(t, walrelay.Config{})
	ctx := context.Background()
	waitFor(t, 10*time.Second, "the slot streamed", func() bool {
		s, err := walrelay.ReadSlotStats(ctx, b.db.Pool, walrelay.DefaultSlot)
		require.NoError(t, err)
		return s.Active
	})
	_, _, err := walrelay.DropSlot(ctx, b.db.Pool, walrelay.DefaultSlot, walrelay.DefaultPublication)
	require.ErrorIs(t, err, walrelay.ErrSlotInUse)
	r.Stop()
	waitFor(t, 10*time.Second, "the slot released", func() bool {
		s, err := walrelay.ReadSlotStats(ctx, b.db.Pool, walrelay.DefaultSlot)
		require.NoError(t, err)
		return !s.Active
	})
	slot, pub, err := walrelay.DropSlot(ctx, b.db.Pool, walrelay.DefaultSlot, walrelay.DefaultPublication)
	require.NoError(t, err)
	require.True(t, slot)
	require.True(t, pub)
	s, err := walrelay.ReadSlotStats(ctx, b.db.Pool, walrelay.DefaultSlot)
	require.NoError(t, err)
	require.False(t, s.Exists)
	slot, pub, err = walrelay.DropSlot(ctx, b.db.Pool, walrelay.DefaultSlot, walrelay.DefaultPublication)
	require.NoError(t, err)
	require.False(t, slot || pub, "nothing left to drop")
}

// The slot's gauges: while Temporal refuses, the lag grows with the
// stream's unconfirmed WAL; once it accepts, the lag falls back; a dropped
// slot reads as gone.
func TestSlotMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(walrelay.NewSlotCollector(b.db.Pool, walrelay.DefaultSlot)))
	r := b.relay(t, walrelay.Config{})
	slot := map[string]string{"slot": walrelay.DefaultSlot}
	waitFor(t, 10*time.Second, "the slot active", func() bool {
		return ferrytest.Sample(t, reg, "ferry_wal_slot_active", slot) == 1
	})
	b.rec.refuse.Store(true)
	for range 20 {
		b.insert(t, false, "a", "b", "c")
	}
	time.Sleep(500 * time.Millisecond)
	refusedLag := ferrytest.Sample(t, reg, "ferry_wal_slot_lag_bytes", slot)
	require.Greater(t, refusedLag, 5000.0, "unconfirmed WAL while Temporal refuses")
	require.GreaterOrEqual(t, ferrytest.Sample(t, reg, "ferry_wal_slot_retained_bytes", slot), refusedLag)
	b.rec.refuse.Store(false)
	waitFor(t, 30*time.Second, "the lag back near zero", func() bool {
		return ferrytest.Sample(t, reg, "ferry_wal_slot_lag_bytes", slot) < 1000
	})
	t.Logf("lag while refused: %.0f bytes (60 events in 20 transactions); after: %.0f", refusedLag, ferrytest.Sample(t, reg, "ferry_wal_slot_lag_bytes", slot))
	r.Stop()
	waitFor(t, 10*time.Second, "the slot released", func() bool {
		return ferrytest.Sample(t, reg, "ferry_wal_slot_active", slot) == 0
	})
	_, _, err := walrelay.DropSlot(context.Background(), b.db.Pool, walrelay.DefaultSlot, walrelay.DefaultPublication)
	require.NoError(t, err)
	require.Zero(t, ferrytest.Sample(t, reg, "ferry_wal_slot_exists", slot))
	require.Zero(t, ferrytest.Sample(t, reg, "ferry_wal_slot_scrape_error", slot))
}

// An aggregate Temporal refuses as invalid does not hold the stream: its
// rows stay pending for the claim pass, the other aggregates' events flow
// and the slot's position moves past it.
func TestInvalidAggregateLeftToTheClaimPass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.rec.invalid = "poison"
	b.relay(t, walrelay.Config{})
	first := b.insert(t, false, "poison", "ok")
	second := b.insert(t, false, "ok")
	waitFor(t, 30*time.Second, "the other aggregate's events streamed", func() bool {
		ids := b.rec.ids()
		return ids[first[1]] == 1 && ids[second[0]] == 1
	})
	require.Zero(t, b.rec.ids()[first[0]])
	waitFor(t, 10*time.Second, "the slot confirmed past the refused event", func() bool {
		s, err := walrelay.ReadSlotStats(context.Background(), b.db.Pool, walrelay.DefaultSlot)
		require.NoError(t, err)
		return s.LagBytes < 1000
	})
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'pending' AND id = $1`, first[0]),
		"the refused row stays pending for the claim pass")
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'dispatched'`))
}

// Creating the slot waits for the transactions open at that moment; a start
// whose deadline passes meanwhile says so.
func TestSlotCreationWaitsForOpenTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	b.insertIn(t, tx, "open")
	r, err := walrelay.New(walrelay.Config{Pool: b.db.Pool, Poller: b.rec, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err = r.Start(sctx)
	require.ErrorContains(t, err, "waits for every transaction open in the database to end")
	r.Stop()
}
