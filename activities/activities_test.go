package activities_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is one test's world: its own schema, its own exchange and queue, and
// the activities wired to both.
type bundle struct {
	db   *ferrytest.DB
	mq   *ferrytest.Broker
	acts *activities.Activities
	// settings the publish activities answer runs with; zero: defaults.
	settings workflows.Settings
}

// setup wires Activities to a fresh schema and a RabbitMQ target over a
// publisher on the test's exchange. pub, when set, replaces that publisher
// (for broker failures); cfg's Pool and Broker are filled in.
func setup(t *testing.T, cfg activities.Config, pub *broker.Publisher) *bundle {
	t.Helper()
	return setupTarget(t, cfg, rabbitmq.Config{Publisher: pub})
}

// setupTarget is setup with the RabbitMQ target's settings; a nil
// Publisher is one on the test's exchange.
func setupTarget(t *testing.T, cfg activities.Config, target rabbitmq.Config) *bundle {
	t.Helper()
	b := &bundle{db: ferrytest.NewDB(t, ""), mq: ferrytest.NewBroker(t, "")}
	if target.Publisher == nil {
		target.Publisher = newPublisher(t, broker.Config{URL: b.mq.URL, Exchange: b.mq.Exchange})
	}
	cfg.Pool, cfg.Broker = b.db.Pool, newTarget(t, target)
	acts, err := activities.New(cfg)
	require.NoError(t, err)
	b.acts = acts
	return b
}

// newTarget is a RabbitMQ target; it closes its publisher with the test.
func newTarget(t *testing.T, cfg rabbitmq.Config) *rabbitmq.Target {
	t.Helper()
	target, err := rabbitmq.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, target.Close()) })
	return target
}

func newPublisher(t *testing.T, cfg broker.Config) *broker.Publisher {
	t.Helper()
	p, err := broker.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// env is a Temporal activity environment with the activities registered
// under their wire names, so every call below goes through the names the
// workflow uses.
func (b *bundle) env(t *testing.T) *testsuite.TestActivityEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))))
	env := s.NewTestActivityEnvironment()
	b.acts.Register(env, b.settings)
	return env
}

func (b *bundle) publish(t *testing.T, in workflows.PublishInput) (workflows.PublishResult, error) {
	t.Helper()
	var res workflows.PublishResult
	val, err := b.env(t).ExecuteActivity(workflows.PublishEventActivity, in)
	if err != nil {
		return res, err
	}
	require.NoError(t, val.Get(&res))
	return res, nil
}

func (b *bundle) mustPublish(t *testing.T, ev event) workflows.PublishResult {
	t.Helper()
	res, err := b.publish(t, ev.input())
	require.NoError(t, err)
	return res
}

func (b *bundle) cursor(t *testing.T, aggType, aggID string) int64 {
	t.Helper()
	val, err := b.env(t).ExecuteActivity(workflows.LoadCursorActivity,
		workflows.CursorInput{AggregateType: aggType, AggregateID: aggID})
	require.NoError(t, err)
	var res workflows.CursorResult
	require.NoError(t, val.Get(&res))
	return res.Delivered
}

// event is an inserted outbox row.
type event struct {
	ID            string
	AggregateType string
	AggregateID   string
	Version       int64
	CreatedAt     time.Time
}

func (e event) input() workflows.PublishInput {
	return workflows.PublishInput{EventID: e.ID, AggregateType: e.AggregateType, AggregateID: e.AggregateID, Version: e.Version}
}

// row holds the optional columns of an insert; zero values leave the
// column to its default (or NULL).
type row struct {
	EventType     string
	Payload       string
	SchemaVersion int
	TraceParent   string
	TraceState    string
	// Headers is the headers column's JSON; "" is NULL.
	Headers string
}

// insert writes one event with plain SQL, as a producer in any language
// would; the trigger assigns the next version.
func insert(t *testing.T, pool *pgxpool.Pool, aggType, aggID string, r row) event {
	t.Helper()
	if r.EventType == "" {
		r.EventType = "created"
	}
	if r.Payload == "" {
		r.Payload = `{"n": 1}`
	}
	if r.SchemaVersion == 0 {
		r.SchemaVersion = 1
	}
	e := event{AggregateType: aggType, AggregateID: aggID}
	err := pool.QueryRow(context.Background(), `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, schema_version, trace_parent, trace_state, headers)
		VALUES ($1, $2, $3, $4::jsonb, $5, nullif($6, ''), nullif($7, ''), nullif($8, '')::jsonb)
		RETURNING id::text, aggregate_version, created_at`,
		aggType, aggID, r.EventType, r.Payload, r.SchemaVersion, r.TraceParent, r.TraceState, r.Headers).
		Scan(&e.ID, &e.Version, &e.CreatedAt)
	require.NoError(t, err)
	return e
}

type rowState struct {
	Status         string
	PublishedAt    *time.Time
	LastError      *string
	LastErrorClass *string
}

func readRow(t *testing.T, pool *pgxpool.Pool, id string) rowState {
	t.Helper()
	var r rowState
	err := pool.QueryRow(context.Background(),
		`SELECT status, published_at, last_error, last_error_class FROM outbox_events WHERE id = $1`, id).
		Scan(&r.Status, &r.PublishedAt, &r.LastError, &r.LastErrorClass)
	require.NoError(t, err)
	return r
}

// delivered reads outbox_aggregates directly, independent of the cursor
// activity under test.
func delivered(t *testing.T, pool *pgxpool.Pool, aggType, aggID string) int64 {
	t.Helper()
	var v int64
	err := pool.QueryRow(context.Background(),
		`SELECT delivered_version FROM outbox_aggregates WHERE aggregate_type = $1 AND aggregate_id = $2`,
		aggType, aggID).Scan(&v)
	require.NoError(t, err)
	return v
}

// receive takes the one message a successful PublishEvent sent. The publish
// was confirmed before the activity returned, so the wait is only a margin.
func (b *bundle) receive(t *testing.T) amqp.Delivery {
	t.Helper()
	d, ok := b.mq.Get(t, 5*time.Second)
	require.True(t, ok, "no message on %s", b.mq.Queue)
	return d
}

// requireNoMessage checks the queue stays empty for a while. The activities
// wait for the broker's confirm, so a message they sent would already be
// there; the wait only covers a late, unexpected one.
func (b *bundle) requireNoMessage(t *testing.T) {
	t.Helper()
	d, ok := b.mq.Get(t, 300*time.Millisecond)
	require.False(t, ok, "unexpected message %s (routing key %q)", d.MessageId, d.RoutingKey)
}

// appError digs the ApplicationError out of what ExecuteActivity returned
// (an *temporal.ActivityError wrapping it).
func appError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	require.Error(t, err)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "not an ApplicationError: %v", err)
	return appErr
}

func TestPublishEventSendsTheRow(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	const (
		traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		traceState  = "vendor=abc"
	)
	ev := insert(t, b.db.Pool, "order", "o-1", row{
		EventType:     "placed",
		Payload:       `{"total": 42, "items": ["a", "b"], "note": "é"}`,
		SchemaVersion: 3,
		TraceParent:   traceParent,
		TraceState:    traceState,
	})

	res := b.mustPublish(t, ev)
	require.False(t, res.AlreadyPublished)

	d := b.receive(t)
	require.Equal(t, ev.ID, d.MessageId)
	require.Equal(t, "placed", d.Type)
	require.Equal(t, b.mq.Exchange, d.Exchange)
	require.Equal(t, "order.placed", d.RoutingKey)
	require.Equal(t, rabbitmq.DefaultRoutingKey("order", "placed"), d.RoutingKey)
	require.Equal(t, "application/json", d.ContentType)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.JSONEq(t, `{"total": 42, "items": ["a", "b"], "note": "é"}`, string(d.Body))
	// AMQP timestamps have whole seconds.
	require.Equal(t, ev.CreatedAt.Unix(), d.Timestamp.Unix())
	require.Equal(t, amqp.Table{
		broker.HeaderAggregateType:    "order",
		broker.HeaderAggregateID:      "o-1",
		broker.HeaderAggregateVersion: int64(1),
		broker.HeaderSchemaVersion:    int64(3),
		broker.HeaderTraceParent:      traceParent,
		broker.HeaderTraceState:       traceState,
	}, d.Headers)

	r := readRow(t, b.db.Pool, ev.ID)
	require.Equal(t, "published", r.Status)
	require.NotNil(t, r.PublishedAt)
	require.Nil(t, r.LastError)
	require.Equal(t, int64(1), delivered(t, b.db.Pool, "order", "o-1"))
}

func TestPublishEventOmitsAbsentTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	ev := insert(t, b.db.Pool, "order", "o-1", row{})

	b.mustPublish(t, ev)

	d := b.receive(t)
	require.Equal(t, amqp.Table{
		broker.HeaderAggregateType:    "order",
		broker.HeaderAggregateID:      "o-1",
		broker.HeaderAggregateVersion: int64(1),
		broker.HeaderSchemaVersion:    int64(1),
	}, d.Headers, "no traceparent/tracestate headers for a row without them")
}

func TestPublishEventUsesConfiguredRoutingKey(t *testing.T) {
	t.Parallel()
	b := setupTarget(t, activities.Config{}, rabbitmq.Config{
		RoutingKey: func(aggregateType, eventType string) string { return "custom." + eventType + "." + aggregateType },
	})
	ev := insert(t, b.db.Pool, "order", "o-1", row{EventType: "placed"})

	b.mustPublish(t, ev)

	require.Equal(t, "custom.placed.order", b.receive(t).RoutingKey)
}

func TestPublishEventSkipsPublishedRow(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	ev := insert(t, b.db.Pool, "order", "o-1", row{})
	b.mustPublish(t, ev)
	b.receive(t)
	first := readRow(t, b.db.Pool, ev.ID)

	res := b.mustPublish(t, ev)

	require.True(t, res.AlreadyPublished)
	b.requireNoMessage(t)
	require.Equal(t, first, readRow(t, b.db.Pool, ev.ID), "a skipped publish leaves the row alone")
}

func TestPublishEventMissingRowIsPermanent(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, id string }{
		{"unknown id", uuid.NewString()},
		// No row can ever have these: retrying would block the aggregate.
		{"not a UUID", "not-a-uuid"},
		{"empty", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, activities.Config{}, nil)
			insert(t, b.db.Pool, "order", "o-1", row{})

			_, err := b.publish(t, workflows.PublishInput{EventID: tt.id, AggregateType: "order", AggregateID: "o-1", Version: 1})

			appErr := appError(t, err)
			require.Equal(t, activities.ErrTypeEventMissing, appErr.Type())
			require.True(t, appErr.NonRetryable())
			require.Contains(t, appErr.Error(), tt.id)
			b.requireNoMessage(t)
		})
	}
}

func TestPublishEventMismatchIsPermanent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*workflows.PublishInput)
		want   string // how the input is described in the message
	}{
		{"version", func(in *workflows.PublishInput) { in.Version = 2 }, "order/o-1 v2"},
		{"aggregate id", func(in *workflows.PublishInput) { in.AggregateID = "o-2" }, "order/o-2 v1"},
		{"aggregate type", func(in *workflows.PublishInput) { in.AggregateType = "invoice" }, "invoice/o-1 v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, activities.Config{}, nil)
			ev := insert(t, b.db.Pool, "order", "o-1", row{})
			in := ev.input()
			tt.modify(&in)

			_, err := b.publish(t, in)

			appErr := appError(t, err)
			require.Equal(t, activities.ErrTypeMismatch, appErr.Type())
			require.True(t, appErr.NonRetryable())
			require.Contains(t, appErr.Error(), "is order/o-1 v1 in outbox_events", "names the row")
			require.Contains(t, appErr.Error(), "signalled as "+tt.want, "names the input")
			b.requireNoMessage(t)
			require.Equal(t, "pending", readRow(t, b.db.Pool, ev.ID).Status)
		})
	}
}

func TestPublishEventUnroutableIsRetryable(t *testing.T) {
	t.Parallel()
	// A fresh exchange, declared by the publisher, with no queue bound.
	exchange := ferrytest.Name("ferry.test.unbound")
	t.Cleanup(func() { deleteExchange(t, exchange) })
	pub := newPublisher(t, broker.Config{URL: ferrytest.AMQPURL(), Exchange: exchange})
	b := setup(t, activities.Config{}, pub)
	ev := insert(t, b.db.Pool, "order", "o-1", row{EventType: "placed"})

	_, err := b.publish(t, ev.input())

	appErr := appError(t, err)
	require.Equal(t, activities.ErrTypeUnroutable, appErr.Type())
	require.False(t, appErr.NonRetryable(), "binding a queue fixes it: the workflow must retry")
	require.Contains(t, appErr.Error(), `"order.placed"`)

	r := readRow(t, b.db.Pool, ev.ID)
	require.Equal(t, "pending", r.Status)
	require.Nil(t, r.PublishedAt)
	require.NotNil(t, r.LastError)
	require.Contains(t, *r.LastError, `routing key "order.placed"`)
	require.Equal(t, activities.ErrTypeUnroutable, *r.LastErrorClass, "the error's class beside it")
	require.Equal(t, int64(0), delivered(t, b.db.Pool, "order", "o-1"))
}

func TestPublishEventBrokerDownIsRetryable(t *testing.T) {
	t.Parallel()
	pub := newPublisher(t, broker.Config{URL: "amqp://guest:guest@" + ferrytest.ClosedAddr(t) + "/", DialTimeout: time.Second})
	b := setup(t, activities.Config{}, pub)
	ev := insert(t, b.db.Pool, "order", "o-1", row{})

	_, err := b.publish(t, ev.input())

	appErr := appError(t, err)
	require.Equal(t, activities.ErrTypeBroker, appErr.Type())
	require.False(t, appErr.NonRetryable())

	r := readRow(t, b.db.Pool, ev.ID)
	require.Equal(t, "pending", r.Status)
	require.NotNil(t, r.LastError)
	require.Contains(t, *r.LastError, broker.ErrUnavailable.Error())
	require.Equal(t, activities.ErrTypeBroker, *r.LastErrorClass)
	require.Equal(t, int64(0), delivered(t, b.db.Pool, "order", "o-1"))
}

func TestPublishEventSuccessClearsLastError(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	ev := insert(t, b.db.Pool, "order", "o-1", row{})
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE outbox_events SET last_error = 'earlier failure', last_error_class = 'Unroutable' WHERE id = $1`, ev.ID)
	require.NoError(t, err)

	b.mustPublish(t, ev)

	r := readRow(t, b.db.Pool, ev.ID)
	require.Nil(t, r.LastError)
	require.Nil(t, r.LastErrorClass)
}

func TestDeliveredVersionNeverMovesBack(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	var evs []event
	for range 3 {
		evs = append(evs, insert(t, b.db.Pool, "order", "o-1", row{}))
	}
	for _, ev := range evs {
		b.mustPublish(t, ev)
	}
	require.Len(t, b.mq.Collect(t, 3, 5*time.Second), 3)
	require.Equal(t, int64(3), delivered(t, b.db.Pool, "order", "o-1"))

	// A late retry of v2 whose first mark was lost: it publishes again (at
	// least once) and marks the row, but the cursor stays at 3.
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE outbox_events SET status = 'pending', published_at = NULL WHERE id = $1`, evs[1].ID)
	require.NoError(t, err)
	res := b.mustPublish(t, evs[1])

	require.False(t, res.AlreadyPublished)
	require.Equal(t, evs[1].ID, b.receive(t).MessageId)
	require.Equal(t, "published", readRow(t, b.db.Pool, evs[1].ID).Status)
	require.Equal(t, int64(3), delivered(t, b.db.Pool, "order", "o-1"))
}

func TestLoadAggregateCursor(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)

	require.Equal(t, int64(0), b.cursor(t, "order", "unknown"), "an aggregate without a row has delivered nothing")

	var evs []event
	for range 3 {
		evs = append(evs, insert(t, b.db.Pool, "order", "o-1", row{}))
	}
	require.Equal(t, int64(0), b.cursor(t, "order", "o-1"), "written is not delivered")

	for i, ev := range evs {
		b.mustPublish(t, ev)
		require.Equal(t, int64(i+1), b.cursor(t, "order", "o-1"))
	}
	require.Equal(t, int64(0), b.cursor(t, "invoice", "o-1"), "the cursor is per aggregate type and id")
}

func TestNewRequiresDependencies(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pub, err := broker.New(broker.Config{URL: "amqp://127.0.0.1:1/"})
	require.NoError(t, err)

	target := newTarget(t, rabbitmq.Config{Publisher: pub})

	_, err = activities.New(activities.Config{Broker: target})
	require.ErrorContains(t, err, "Config.Pool")
	_, err = activities.New(activities.Config{Pool: pool})
	require.ErrorContains(t, err, "Config.Broker")
	_, err = activities.New(activities.Config{Pool: pool, Broker: target})
	require.NoError(t, err)

	// Each part needs only its own dependencies.
	_, err = activities.NewPublish(activities.PublishConfig{Pool: pool})
	require.ErrorContains(t, err, "PublishConfig.Broker")
	_, err = activities.NewRepair(activities.RepairConfig{Broker: target})
	require.ErrorContains(t, err, "RepairConfig.Pool")
	_, err = activities.NewMaintenance(activities.MaintenanceConfig{})
	require.ErrorContains(t, err, "MaintenanceConfig.Pool")
	_, err = activities.NewMaintenance(activities.MaintenanceConfig{Pool: pool})
	require.NoError(t, err, "maintenance needs no broker")
}

// recordingRegistry records what Register registers.
type recordingRegistry struct {
	names []string
}

func (r *recordingRegistry) RegisterActivityWithOptions(_ any, options activity.RegisterOptions) {
	r.names = append(r.names, options.Name)
}

func TestRegisterUsesWireNames(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pub, err := broker.New(broker.Config{URL: "amqp://127.0.0.1:1/"})
	require.NoError(t, err)
	acts, err := activities.New(activities.Config{Pool: pool, Broker: newTarget(t, rabbitmq.Config{Publisher: pub})})
	require.NoError(t, err)

	// Each part registers its own concern; together, every name once.
	var publish, repair, maintenance, all recordingRegistry
	acts.Publish.Register(&publish, workflows.Settings{})
	acts.Repair.Register(&repair)
	acts.Maintenance.Register(&maintenance)
	acts.Register(&all, workflows.Settings{})

	require.ElementsMatch(t, []string{workflows.PublishEventActivity, workflows.LoadCursorActivity, workflows.PublishBatchActivity, workflows.ReleaseAggregateActivity}, publish.names)
	require.ElementsMatch(t, []string{workflows.QuarantineActivity, workflows.RepairActivity, workflows.ReplayActivity, workflows.HoldEventsActivity, workflows.ReleaseHeldActivity}, repair.names)
	require.ElementsMatch(t, []string{workflows.PurgeActivity, workflows.ReconcileActivity, workflows.DriftActivity}, maintenance.names)
	require.ElementsMatch(t, append(append(publish.names, repair.names...), maintenance.names...), all.names)
}

func deleteExchange(t *testing.T, name string) {
	t.Helper()
	conn, err := amqp.Dial(ferrytest.AMQPURL())
	if err != nil {
		t.Errorf("delete exchange %s: %v", name, err)
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("delete exchange %s: %v", name, err)
		return
	}
	if err := ch.ExchangeDelete(name, false, false); err != nil && !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Errorf("delete exchange %s: %v", name, err)
	}
}
