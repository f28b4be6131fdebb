package schema_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/schema"
	"github.com/ferry-outbox/ferry/workflows"
)

type roles struct {
	db                                 *ferrytest.DB
	producer, relay, consumer, cschema string
}

// setupRoles runs roles.sql with psql, exactly as docs/deployment.md says, on a
// fresh schema, with role names unique to the test (roles are cluster-wide)
// that are dropped at cleanup.
func setupRoles(t *testing.T) *roles {
	t.Helper()
	r := &roles{
		db:       ferrytest.NewDB(t, ""),
		producer: ferrytest.Name("ferry_producer"),
		relay:    ferrytest.Name("ferry_relay"),
		consumer: ferrytest.Name("ferry_consumer"),
		cschema:  ferrytest.Name("ferry_consumer"),
	}
	// Registered after testenv's schema cleanup, so it runs before it.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, ferrytest.PostgresURL())
		if err != nil {
			t.Errorf("drop roles: %v", err)
			return
		}
		defer conn.Close(ctx)
		for _, role := range []string{r.producer, r.relay, r.consumer} {
			id := pgx.Identifier{role}.Sanitize()
			if _, err := conn.Exec(ctx, "DROP OWNED BY "+id+" CASCADE"); err != nil {
				t.Errorf("drop owned by %s: %v", role, err)
			}
			if _, err := conn.Exec(ctx, "DROP ROLE "+id); err != nil {
				t.Errorf("drop role %s: %v", role, err)
			}
		}
	})
	// Twice: the script must be safe to re-run after every upgrade.
	for range 2 {
		r.runScript(t)
	}
	return r
}

func (r *roles) runScript(t *testing.T) {
	t.Helper()
	psql, err := exec.LookPath("psql")
	require.NoError(t, err, "psql is required to run schema/roles.sql (apt-get install postgresql-client)")
	cmd := exec.Command(psql, ferrytest.PostgresURL(), "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-v", "schema="+r.db.Schema, "-v", "producer="+r.producer, "-v", "relay="+r.relay,
		"-v", "consumer="+r.consumer, "-v", "consumer_schema="+r.cschema, "-f", "roles.sql")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "psql -f roles.sql:\n%s", out)
}

// as runs sql as role inside a transaction that is rolled back, and returns
// its error.
func (r *roles) as(t *testing.T, role, sql string, args ...any) error {
	t.Helper()
	ctx := context.Background()
	tx, err := r.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{role}.Sanitize())
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sql, args...)
	return err
}

func requireDenied(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: want permission denied, got %v", what, err)
	require.Equal(t, "42501", pgErr.Code, "%s: want insufficient_privilege, got %v", what, err)
}

// pool returns a pool on the test schema whose every connection acts as
// role, to run Ferry's own code under it.
func (r *roles) pool(t *testing.T, role string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(r.db.URL)
	require.NoError(t, err)
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+pgx.Identifier{role}.Sanitize())
		return err
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func (r *roles) insert(t *testing.T, aggID string) {
	t.Helper()
	_, err := r.db.Pool.Exec(context.Background(),
		`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'created', '{}')`, aggID)
	require.NoError(t, err)
}

func TestProducerRole(t *testing.T) {
	t.Parallel()
	r := setupRoles(t)
	ctx := context.Background()

	// Ferry's producer API works under the role, versions and conflicts
	// included: the trigger reaches outbox_aggregates as its owner.
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	pool := r.pool(t, r.producer)
	var got []outbox.Written
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		got, err = w.WriteBatch(ctx, tx, []outbox.Event{
			{AggregateType: "order", AggregateID: "1", EventType: "created", Payload: json.RawMessage(`{"total": 1}`)},
			{AggregateType: "order", AggregateID: "1", EventType: "paid", Payload: json.RawMessage(`{}`)},
		})
		return err
	}))
	require.Equal(t, []int64{1, 2}, []int64{got[0].AggregateVersion, got[1].AggregateVersion})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := w.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "1", AggregateVersion: 2, EventType: "x", Payload: json.RawMessage(`{}`)})
		return err
	})
	require.ErrorIs(t, err, outbox.ErrVersionConflict)
	require.NoError(t, r.as(t, r.producer, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '2', 'created', '{}')`),
		"plain SQL, as from another language")

	for what, sql := range map[string]string{
		"read payloads":             `SELECT payload FROM outbox_events`,
		"read every column":         `SELECT * FROM outbox_events`,
		"mark published":            `UPDATE outbox_events SET status = 'published'`,
		"change a payload":          `UPDATE outbox_events SET payload = '{}'`,
		"delete events":             `DELETE FROM outbox_events`,
		"truncate":                  `TRUNCATE outbox_events`,
		"read version counters":     `SELECT * FROM outbox_aggregates`,
		"move delivered_version":    `UPDATE outbox_aggregates SET delivered_version = 100`,
		"insert a counter":          `INSERT INTO outbox_aggregates VALUES ('order', '9', 5, 5)`,
		"read migrations":           `SELECT * FROM ferry_schema_migrations`,
		"read the repair audit":     `SELECT * FROM ferry_repairs`,
		"create a table":            `CREATE TABLE sneaky (id int)`,
		"call the trigger function": `SELECT outbox_assign_version()`,
	} {
		requireDenied(t, r.as(t, r.producer, sql), what)
	}
}

// signalOK is a Temporal client whose starts and signal-with-starts
// always succeed.
type signalOK struct{ client.Client }

func (signalOK) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, nil
}

func (signalOK) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, nil
}

func TestRelayRole(t *testing.T) {
	t.Parallel()
	r := setupRoles(t)
	br := ferrytest.NewBroker(t, "")
	ctx := context.Background()
	pool := r.pool(t, r.relay)
	r.insert(t, "1")

	// The poller's claim, release (signal failed) and mark (signal accepted).
	failing, err := poller.New(poller.Config{Pool: pool, Temporal: ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t)), SignalTimeout: time.Second})
	require.NoError(t, err)
	n, err := failing.RunOnce(ctx)
	require.Equal(t, 1, n)
	require.ErrorContains(t, err, "signal 1 of 1 aggregates")
	var lastErr string
	require.NoError(t, r.db.Pool.QueryRow(ctx, `SELECT coalesce(last_error, '') FROM outbox_events`).Scan(&lastErr))
	require.NotEmpty(t, lastErr, "the release recorded the failure")
	_, err = r.db.Pool.Exec(ctx, `UPDATE outbox_events SET next_attempt_at = now()`)
	require.NoError(t, err)
	ok, err := poller.New(poller.Config{Pool: pool, Temporal: signalOK{}})
	require.NoError(t, err)
	n, err = ok.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// The worker's activities: load, publish, mark published, cursor.
	pub, err := broker.New(broker.Config{URL: br.URL, Exchange: br.Exchange})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	target, err := rabbitmq.New(rabbitmq.Config{Publisher: pub})
	require.NoError(t, err)
	acts, err := activities.New(activities.Config{Pool: pool, Broker: target})
	require.NoError(t, err)
	var id string
	require.NoError(t, r.db.Pool.QueryRow(ctx, `SELECT id::text FROM outbox_events`).Scan(&id))
	suite := &testsuite.WorkflowTestSuite{}
	suite.SetLogger(ferrytest.QuietLogger())
	env := suite.NewTestActivityEnvironment()
	acts.Register(env, workflows.Settings{})
	_, err = env.ExecuteActivity(workflows.PublishEventActivity, workflows.PublishInput{EventID: id, AggregateType: "order", AggregateID: "1", Version: 1})
	require.NoError(t, err)
	_, ok2 := br.Get(t, 5*time.Second)
	require.True(t, ok2, "the event reached RabbitMQ")
	val, err := env.ExecuteActivity(workflows.LoadCursorActivity, workflows.CursorInput{AggregateType: "order", AggregateID: "1"})
	require.NoError(t, err)
	var cursor workflows.CursorResult
	require.NoError(t, val.Get(&cursor))
	require.Equal(t, int64(1), cursor.Delivered)

	// The publish-first lane: the relay takes the aggregate, publishes its
	// event itself, marks it and gives the aggregate back.
	r.insert(t, "lane")
	lane, err := poller.New(poller.Config{Pool: pool, Temporal: ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t)),
		Lane: poller.LanePublishFirst, Target: target, Name: "lane-relay"})
	require.NoError(t, err)
	require.NoError(t, lane.JoinFleet(ctx))
	n, err = lane.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	lane.LeaveFleet()
	_, ok2 = br.Get(t, 5*time.Second)
	require.True(t, ok2, "the lane's event reached RabbitMQ")
	require.Equal(t, 1, count(t, r.db.Pool, `SELECT count(*) FROM outbox_events WHERE aggregate_id = 'lane' AND status = 'published' AND owner_epoch > 0`))
	require.Equal(t, 0, count(t, r.db.Pool, `SELECT count(*) FROM outbox_owners`), "the relay gave the aggregate back")

	// A poison event: quarantined, then patched on an operator's request,
	// which writes the audit row.
	r.insert(t, "2")
	var poison string
	require.NoError(t, r.db.Pool.QueryRow(ctx, `SELECT id::text FROM outbox_events WHERE aggregate_id = '2'`).Scan(&poison))
	_, err = env.ExecuteActivity(workflows.QuarantineActivity, workflows.QuarantineInput{EventID: poison, EventType: "created", ErrorClass: "test", Error: "boom"})
	require.NoError(t, err)
	_, err = env.ExecuteActivity(workflows.RepairActivity, workflows.RepairInput{
		Request:       workflows.RepairRequest{RequestID: "r1", Action: workflows.ActionPatch, EventID: poison, Reason: "fix", Actor: "ops", Payload: json.RawMessage(`{"fixed": true}`)},
		AggregateType: "order", AggregateID: "2", Version: 1,
	})
	require.NoError(t, err)
	require.Equal(t, 1, count(t, r.db.Pool, `SELECT count(*) FROM ferry_repairs WHERE request_id = 'r1'`))

	// /metrics reads the backlog, the table's statistics and the retention
	// record; retention runs under the role: it deletes delivered rows past
	// their age through ferry_delete_delivered (migration 0015), though the
	// role may not delete events itself (below).
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewOutboxCollector(pool))
	require.Zero(t, ferrytest.Sample(t, reg, "ferry_outbox_scrape_error", nil), "the relay reads everything /metrics reports")
	require.True(t, ferrytest.HasMetric(t, reg, "ferry_retention_last_success_timestamp_seconds"))
	_, err = r.db.Pool.Exec(ctx, `UPDATE outbox_events SET published_at = now() - interval '40 days' WHERE aggregate_id IN ('1', 'lane')`)
	require.NoError(t, err)
	before := count(t, r.db.Pool, `SELECT count(*) FROM outbox_events`)
	val, err = env.ExecuteActivity(workflows.PurgeActivity, workflows.RetentionInput{})
	require.NoError(t, err, "retention runs under the relay role")
	var purged workflows.RetentionResult
	require.NoError(t, val.Get(&purged))
	require.Equal(t, int64(2), purged.Deleted, "the two delivered rows past retention")
	require.Equal(t, before-2, count(t, r.db.Pool, `SELECT count(*) FROM outbox_events`), "the quarantined row stays")
	require.Equal(t, 1, count(t, r.db.Pool, `SELECT count(*) FROM ferry_maintenance WHERE job = 'retention' AND counted_at IS NOT NULL AND succeeded_at IS NOT NULL`),
		"the relay records the retention count")

	for what, sql := range map[string]string{
		"insert events":        `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '3', 'created', '{}')`,
		"change an event type": `UPDATE outbox_events SET event_type = 'forged'`,
		"move an event":        `UPDATE outbox_events SET aggregate_id = '9', aggregate_version = 7`,
		"rewrite the audit":    `UPDATE ferry_repairs SET reason = 'nothing happened'`,
		"erase the audit":      `DELETE FROM ferry_repairs`,
		"delete events":        `DELETE FROM outbox_events`,
		"truncate":             `TRUNCATE outbox_events`,
		"move last_version":    `UPDATE outbox_aggregates SET last_version = 100`,
		"delete counters":      `DELETE FROM outbox_aggregates`,
		"create a table":       `CREATE TABLE sneaky (id int)`,
		"reset the epochs":     `ALTER SEQUENCE ferry_owner_epoch RESTART`,
	} {
		requireDenied(t, r.as(t, r.relay, sql), what)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string) (n int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

func TestConsumerRole(t *testing.T) {
	t.Parallel()
	r := setupRoles(t)
	s := pgx.Identifier{r.cschema}.Sanitize()
	require.NoError(t, r.as(t, r.consumer, fmt.Sprintf(`
		CREATE TABLE %[1]s.inbox_processed (consumer_name text, event_id text, PRIMARY KEY (consumer_name, event_id));
		INSERT INTO %[1]s.inbox_processed VALUES ('orders', 'e1');
		DELETE FROM %[1]s.inbox_processed;
		CREATE TABLE %[1]s.order_projection (id text PRIMARY KEY)`, s)),
		"the consumer owns its schema: create, write, delete")

	in := func(schema, table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	for _, c := range []struct{ role, what, sql string }{
		{r.consumer, "read the outbox", `SELECT count(*) FROM ` + in(r.db.Schema, "outbox_events")},
		{r.consumer, "write the outbox", `INSERT INTO ` + in(r.db.Schema, "outbox_events") + ` (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'x', '{}')`},
		{r.consumer, "read the version counters", `SELECT * FROM ` + in(r.db.Schema, "outbox_aggregates")},
		{r.consumer, "create in the outbox's schema", `CREATE TABLE ` + in(r.db.Schema, "sneaky") + ` (id int)`},
		{r.producer, "producer creates in the consumer's schema", `CREATE TABLE ` + in(r.cschema, "sneaky") + ` (id int)`},
		{r.relay, "relay reads the consumer's schema", `SELECT * FROM ` + in(r.cschema, "anything")},
	} {
		requireDenied(t, r.as(t, c.role, c.sql), c.what)
	}
}

// An upgrade whose migration replaces the version trigger's function
// (CREATE OR REPLACE resets SECURITY DEFINER and the search_path roles.sql
// set) leaves producers able to write: `ferry migrate` puts the function's
// privileges back, without roles.sql being run again. Replayed here by
// applying 0005 (which replaces outbox_assign_version) once more.
func TestMigrationKeepsTheRolesPrivileges(t *testing.T) {
	t.Parallel()
	r := setupRoles(t)
	ctx := context.Background()
	_, err := r.db.Pool.Exec(ctx, `DELETE FROM ferry_schema_migrations WHERE version = 5`)
	require.NoError(t, err)
	res, err := schema.Migrate(ctx, r.db.Pool, nil)
	require.NoError(t, err)
	require.Len(t, res.Applied, 1)
	require.Equal(t, 5, res.Applied[0].Version)

	var secdef bool
	var config, acl string
	require.NoError(t, r.db.Pool.QueryRow(ctx, `SELECT prosecdef, coalesce(array_to_string(proconfig, ';'), ''), coalesce(proacl::text, '')
		FROM pg_proc WHERE proname = 'outbox_assign_version' AND pronamespace = current_schema()::regnamespace`).Scan(&secdef, &config, &acl))
	require.True(t, secdef, "SECURITY DEFINER kept")
	require.Equal(t, "search_path="+r.db.Schema+", pg_temp", config)
	require.NotRegexp(t, `[{,]=X/`, acl, "PUBLIC still cannot execute it")

	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, r.pool(t, r.producer), func(tx pgx.Tx) error {
		_, err := w.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "created", Payload: json.RawMessage(`{}`)})
		return err
	}), "the producer writes after the upgrade")
	requireDenied(t, r.as(t, r.producer, `SELECT * FROM outbox_aggregates`), "read version counters")
}
