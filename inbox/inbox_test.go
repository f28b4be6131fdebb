package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/internal/testenv"
	"github.com/ferry-outbox/ferry/metrics"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup gives a test its own schema with the outbox and the inbox tables
// (they share a database in `ferry dev`), a business table the handlers
// write to, and an Inbox with defaults.
func setup(t *testing.T, ordering inbox.Ordering) (*ferrytest.DB, *inbox.Inbox) {
	t.Helper()
	db := ferrytest.NewDB(t, "")
	_, err := inbox.Migrate(t.Context(), db.Pool, nil)
	require.NoError(t, err)
	_, err = db.Pool.Exec(t.Context(), `CREATE TABLE effects (event_id text NOT NULL, version bigint NOT NULL, seq serial)`)
	require.NoError(t, err)
	in, err := inbox.New(inbox.Config{Pool: db.Pool, Consumer: "test", Ordering: ordering})
	require.NoError(t, err)
	return db, in
}

// record is a handler whose effect is one row in effects: a double
// application shows as two rows.
func record(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, version) VALUES ($1, $2)`, ev.ID, ev.AggregateVersion)
	return err
}

func event(id string, version int64) inbox.Event {
	return inbox.Event{ID: id, AggregateType: "order", AggregateID: "42", AggregateVersion: version, EventType: "created", SchemaVersion: 1}
}

// effects lists the applied (event id, version) pairs in the order they
// committed.
func effects(t *testing.T, db *ferrytest.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(t.Context(), `SELECT event_id || '@v' || version FROM effects ORDER BY seq`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	pool := &pgxpool.Pool{} // never used: validation only
	tests := []struct {
		name      string
		cfg       inbox.Config
		wantField string
	}{
		{name: "valid", cfg: inbox.Config{Pool: pool, Consumer: "inventory.v1"}},
		{name: "no pool", cfg: inbox.Config{Consumer: "inventory"}, wantField: "Config.Pool"},
		{name: "no consumer", cfg: inbox.Config{Pool: pool}, wantField: "Config.Consumer"},
		{name: "consumer with space", cfg: inbox.Config{Pool: pool, Consumer: "a b"}, wantField: "Config.Consumer"},
		{name: "unknown ordering", cfg: inbox.Config{Pool: pool, Consumer: "c", Ordering: 7}, wantField: "Config.Ordering"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := inbox.New(tt.cfg)
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantField)
		})
	}
}

// testenv.Postgres applied the outbox's migrations; the inbox's apply next
// to them, once, however many processes run Migrate at the same moment.
func TestMigrateConcurrentlyNextToTheOutbox(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ms, err := inbox.Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, ms)

	var wg sync.WaitGroup
	applied := make([]int, 4)
	errs := make([]error, 4)
	for i := range applied {
		wg.Go(func() {
			res, err := inbox.Migrate(t.Context(), db.Pool, nil)
			applied[i], errs[i] = len(res.Applied), err
		})
	}
	wg.Wait()
	total := 0
	for i := range applied {
		require.NoError(t, errs[i])
		total += applied[i]
	}
	require.Equal(t, len(ms), total, "exactly one migrator applies each migration")

	var outbox, inboxVersions int
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM ferry_schema_migrations`).Scan(&outbox))
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM ferry_inbox_migrations`).Scan(&inboxVersions))
	require.Positive(t, outbox, "the outbox's bookkeeping is untouched")
	require.Equal(t, len(ms), inboxVersions)
}

// Issue #4, test 1 at the inbox level: the same event processed by eight
// instances at once takes effect once. The first handler holds its
// transaction open until another instance is blocked on the event's
// primary key, so the deliveries really overlap.
func TestSameEventConcurrentlyTakesEffectOnce(t *testing.T) {
	t.Parallel()
	db, in := setup(t, inbox.PerAggregate)
	ctx := t.Context()

	waitForBlockedPeer := func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if err := testenv.WaitForWaiter(ctx, tx, 10*time.Second); err != nil {
			return err
		}
		return record(ctx, tx, ev)
	}

	const instances = 8
	var wg sync.WaitGroup
	results := make([]inbox.Result, instances)
	errs := make([]error, instances)
	for i := range instances {
		wg.Go(func() {
			results[i], errs[i] = in.Process(ctx, event("ev-1", 1), waitForBlockedPeer)
		})
	}
	wg.Wait()
	counts := map[inbox.Outcome]int{}
	for i := range instances {
		require.NoError(t, errs[i])
		counts[results[i].Outcome]++
	}
	require.Equal(t, map[inbox.Outcome]int{inbox.Applied: 1, inbox.Duplicate: instances - 1}, counts)
	require.Equal(t, []string{"ev-1@v1"}, effects(t, db))
}

// A failing handler leaves nothing: not its own writes, not the inbox rows.
// The redelivery applies the event.
func TestHandlerErrorRollsBackEverything(t *testing.T) {
	t.Parallel()
	db, in := setup(t, inbox.PerAggregate)
	ctx := t.Context()
	boom := errors.New("boom")

	_, err := in.Process(ctx, event("ev-1", 1), func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		require.NoError(t, record(ctx, tx, ev))
		return boom
	})
	var herr *inbox.HandlerError
	require.ErrorAs(t, err, &herr)
	require.ErrorIs(t, err, boom)
	require.Empty(t, effects(t, db))

	res, err := in.Process(ctx, event("ev-1", 1), record)
	require.NoError(t, err)
	require.Equal(t, inbox.Applied, res.Outcome)
	require.Equal(t, []string{"ev-1@v1"}, effects(t, db))
}

// The ordering policy, step by step on one aggregate.
func TestPerAggregateOrderingPolicy(t *testing.T) {
	t.Parallel()
	db, in := setup(t, inbox.PerAggregate)
	ctx := t.Context()

	steps := []struct {
		ev   inbox.Event
		want inbox.Result
	}{
		{event("a", 1), inbox.Result{Outcome: inbox.Applied, LastApplied: 1}},
		{event("c", 3), inbox.Result{Outcome: inbox.Gap, LastApplied: 1}},
		{event("b", 2), inbox.Result{Outcome: inbox.Applied, LastApplied: 2}},
		{event("c", 3), inbox.Result{Outcome: inbox.Applied, LastApplied: 3}},
		{event("a", 1), inbox.Result{Outcome: inbox.Duplicate}},
		{event("b-replayed-with-new-id", 2), inbox.Result{Outcome: inbox.Stale, LastApplied: 3}},
		{event("e", 5), inbox.Result{Outcome: inbox.Gap, LastApplied: 3}},
	}
	for i, s := range steps {
		res, err := in.Process(ctx, s.ev, record)
		require.NoError(t, err, "step %d", i)
		require.Equal(t, s.want, res, "step %d: %s v%d", i, s.ev.ID, s.ev.AggregateVersion)
	}
	require.Equal(t, []string{"a@v1", "b@v2", "c@v3"}, effects(t, db))

	// Another aggregate and another consumer keep cursors of their own.
	other := event("x", 1)
	other.AggregateID = "43"
	res, err := in.Process(ctx, other, record)
	require.NoError(t, err)
	require.Equal(t, inbox.Applied, res.Outcome)
	second, err := inbox.New(inbox.Config{Pool: db.Pool, Consumer: "another"})
	require.NoError(t, err)
	res, err = second.Process(ctx, event("a", 1), record)
	require.NoError(t, err)
	require.Equal(t, inbox.Applied, res.Outcome, "each consumer applies every event once")
}

func TestUnorderedAppliesEveryNewEventOnce(t *testing.T) {
	t.Parallel()
	db, in := setup(t, inbox.Unordered)
	ctx := t.Context()
	for _, ev := range []inbox.Event{event("c", 3), event("a", 1), event("c", 3), {ID: "no-aggregate"}} {
		_, err := in.Process(ctx, ev, record)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"c@v3", "a@v1", "no-aggregate@v0"}, effects(t, db))
}

func TestInvalidEventsAreRejectedBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	db, in := setup(t, inbox.PerAggregate)
	long := make([]byte, 201)
	for i := range long {
		long[i] = 'x'
	}
	tests := []struct {
		name string
		ev   inbox.Event
	}{
		{"no id", inbox.Event{AggregateType: "order", AggregateID: "1", AggregateVersion: 1}},
		{"id too long", inbox.Event{ID: string(long), AggregateType: "order", AggregateID: "1", AggregateVersion: 1}},
		{"no aggregate type", inbox.Event{ID: "e", AggregateID: "1", AggregateVersion: 1}},
		{"no aggregate id", inbox.Event{ID: "e", AggregateType: "order", AggregateVersion: 1}},
		{"version 0", inbox.Event{ID: "e", AggregateType: "order", AggregateID: "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := in.Process(t.Context(), tt.ev, record)
			require.ErrorIs(t, err, inbox.ErrInvalidEvent)
		})
	}
	t.Cleanup(func() {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox_processed_events`).Scan(&n))
		require.Zero(t, n)
	})
}

// deleteTracer records how many rows each DELETE statement removed.
type deleteTracer struct {
	mu      sync.Mutex
	batches []int64
}

func (d *deleteTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (d *deleteTracer) TraceQueryEnd(_ context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err == nil && data.CommandTag.Delete() {
		d.mu.Lock()
		d.batches = append(d.batches, data.CommandTag.RowsAffected())
		d.mu.Unlock()
	}
}

func seedProcessed(t *testing.T, db *ferrytest.DB, consumer string, n int, age time.Duration) {
	t.Helper()
	_, err := db.Pool.Exec(t.Context(), `
		INSERT INTO inbox_processed_events (consumer_name, event_id, aggregate_type, aggregate_id, aggregate_version, event_type, processed_at)
		SELECT $1, $2 || g, 'order', g::text, 1, 'created', now() - make_interval(secs => $3)
		FROM generate_series(1, $4) g`, consumer, fmt.Sprintf("%s-%s-", consumer, age), age.Seconds(), n)
	require.NoError(t, err)
}

func countProcessed(t *testing.T, db *ferrytest.DB, consumer string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM inbox_processed_events WHERE consumer_name = $1`, consumer).Scan(&n))
	return n
}

// Retention deletes only expired rows of its own consumer, in statements of
// at most BatchSize rows each.
func TestCleanerDeletesExpiredRowsInBoundedBatches(t *testing.T) {
	t.Parallel()
	db, _ := setup(t, inbox.PerAggregate)
	seedProcessed(t, db, "test", 2500, 48*time.Hour)
	seedProcessed(t, db, "test", 10, 10*time.Minute)
	seedProcessed(t, db, "other", 5, 48*time.Hour)

	tracer := &deleteTracer{}
	pcfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pcfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(t.Context(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	reg := prometheus.NewRegistry()
	m, err := metrics.NewConsumer(reg)
	require.NoError(t, err)
	c, err := inbox.NewCleaner(inbox.CleanerConfig{Pool: pool, Consumer: "test", Retention: 24 * time.Hour, Metrics: m})
	require.NoError(t, err)
	before := time.Now().Unix()
	n, err := c.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2500, n)
	require.Equal(t, 2500.0, ferrytest.Sample(t, reg, "ferry_inbox_cleaned_rows_total", nil), "cleanup progress on /metrics")
	require.GreaterOrEqual(t, ferrytest.Sample(t, reg, "ferry_inbox_cleaned_timestamp_seconds", nil), float64(before))
	require.Equal(t, []int64{1000, 1000, 500}, tracer.batches)
	require.Equal(t, 10, countProcessed(t, db, "test"), "rows inside the retention stay")
	require.Equal(t, 5, countProcessed(t, db, "other"), "another consumer's rows are its own cleaner's")

	n, err = c.RunOnce(t.Context())
	require.NoError(t, err)
	require.Zero(t, n)
}

// A cleaner that fails every round from its start (here: no inbox tables)
// still has a timestamp to age on, so the stall alert can fire.
func TestCleanerThatNeverFinishesARoundStillAges(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "") // the outbox's schema only
	reg := prometheus.NewRegistry()
	m, err := metrics.NewConsumer(reg)
	require.NoError(t, err)
	c, err := inbox.NewCleaner(inbox.CleanerConfig{Pool: db.Pool, Consumer: "test", Metrics: m, Interval: time.Hour})
	require.NoError(t, err)
	_, err = c.RunOnce(t.Context())
	require.Error(t, err, "no inbox table: the round fails")

	before := time.Now().Unix()
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(c.Stop)
	started := ferrytest.Sample(t, reg, "ferry_inbox_cleaned_timestamp_seconds", nil)
	require.GreaterOrEqual(t, started, float64(before))
	require.Zero(t, ferrytest.Sample(t, reg, "ferry_inbox_cleaned_rows_total", nil))
}

// Only one runner cleans at a time: while another holds the lock, a round
// deletes nothing and fails nowhere.
func TestCleanerSkipsWhileAnotherRuns(t *testing.T) {
	t.Parallel()
	db, _ := setup(t, inbox.PerAggregate)
	seedProcessed(t, db, "test", 20, 48*time.Hour)
	c, err := inbox.NewCleaner(inbox.CleanerConfig{Pool: db.Pool, Consumer: "test", Retention: 24 * time.Hour, BatchSize: 7})
	require.NoError(t, err)

	holder, err := db.Pool.Acquire(t.Context())
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(t.Context(), `SELECT pg_advisory_lock(hashtext(current_schema()), $1::int)`, c.LockKey())
	require.NoError(t, err)

	n, err := c.RunOnce(t.Context())
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 20, countProcessed(t, db, "test"))

	_, err = holder.Exec(t.Context(), `SELECT pg_advisory_unlock(hashtext(current_schema()), $1::int)`, c.LockKey())
	require.NoError(t, err)
	n, err = c.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 20, n)
}

func TestCleanerStartCleansAndStopTwice(t *testing.T) {
	t.Parallel()
	db, _ := setup(t, inbox.PerAggregate)
	seedProcessed(t, db, "test", 3, 48*time.Hour)
	c, err := inbox.NewCleaner(inbox.CleanerConfig{Pool: db.Pool, Consumer: "test", Retention: 24 * time.Hour})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	require.Error(t, c.Start(t.Context()), "a second Start is refused")
	require.Eventually(t, func() bool { return countProcessed(t, db, "test") == 0 }, 10*time.Second, 20*time.Millisecond,
		"the first round runs at Start")
	c.Stop()
	c.Stop()
}

func TestNewCleanerValidatesConfig(t *testing.T) {
	t.Parallel()
	pool := &pgxpool.Pool{}
	tests := []struct {
		name      string
		cfg       inbox.CleanerConfig
		wantField string
	}{
		{name: "defaults", cfg: inbox.CleanerConfig{Pool: pool, Consumer: "c"}},
		{name: "no pool", cfg: inbox.CleanerConfig{Consumer: "c"}, wantField: "CleanerConfig.Pool"},
		{name: "bad consumer", cfg: inbox.CleanerConfig{Pool: pool, Consumer: "a/b"}, wantField: "CleanerConfig.Consumer"},
		{name: "retention too short", cfg: inbox.CleanerConfig{Pool: pool, Consumer: "c", Retention: time.Minute}, wantField: "CleanerConfig.Retention"},
		{name: "batch over 1000", cfg: inbox.CleanerConfig{Pool: pool, Consumer: "c", BatchSize: 1001}, wantField: "CleanerConfig.BatchSize"},
		{name: "negative batch", cfg: inbox.CleanerConfig{Pool: pool, Consumer: "c", BatchSize: -1}, wantField: "CleanerConfig.BatchSize"},
		{name: "interval too short", cfg: inbox.CleanerConfig{Pool: pool, Consumer: "c", Interval: time.Millisecond}, wantField: "CleanerConfig.Interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := inbox.NewCleaner(tt.cfg)
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantField)
		})
	}
}

func TestCleanerModuleGraphIsComplete(t *testing.T) {
	t.Parallel()
	require.NoError(t, fx.ValidateApp(fx.NopLogger, fx.Supply(inbox.CleanerConfig{}), inbox.CleanerModule))
}
