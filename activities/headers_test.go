package activities_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// requireFerryHeaders checks Ferry's own headers of a message of ev.
func requireFerryHeaders(t *testing.T, d amqp.Delivery, ev event) {
	t.Helper()
	require.Equal(t, ev.ID, d.MessageId)
	require.Equal(t, ev.AggregateType, d.Headers[broker.HeaderAggregateType])
	require.Equal(t, ev.AggregateID, d.Headers[broker.HeaderAggregateID])
	require.Equal(t, ev.Version, d.Headers[broker.HeaderAggregateVersion])
	require.Equal(t, int64(1), d.Headers[broker.HeaderSchemaVersion])
}

// An event's headers arrive on a real RabbitMQ queue as AMQP string
// headers beside Ferry's, on each path that builds a message: the publish
// of one event, the batch publish, and a replay.
func TestPublishedMessagesCarryTheEventsHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	ctx := context.Background()

	// Written through the Go API, as a producer would.
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	headers := map[string]string{"tenant": "acme", "Correlation.ID": "c-1 ✓", "note": ""}
	var written []outbox.Written
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		written, err = w.WriteBatch(ctx, tx, []outbox.Event{
			{AggregateType: "order", AggregateID: "h-1", EventType: "created", Payload: json.RawMessage(`{}`), Headers: headers},
			{AggregateType: "order", AggregateID: "h-2", EventType: "created", Payload: json.RawMessage(`{}`), Headers: headers},
			{AggregateType: "order", AggregateID: "h-2", EventType: "created", Payload: json.RawMessage(`{}`)},
		})
		return err
	}))
	one := event{ID: written[0].ID.String(), AggregateType: "order", AggregateID: "h-1", Version: 1}
	batch := []event{
		{ID: written[1].ID.String(), AggregateType: "order", AggregateID: "h-2", Version: 1},
		{ID: written[2].ID.String(), AggregateType: "order", AggregateID: "h-2", Version: 2},
	}
	requireHeaders := func(d amqp.Delivery, ev event, want map[string]string) {
		t.Helper()
		requireFerryHeaders(t, d, ev)
		for k, v := range want {
			require.Equal(t, v, d.Headers[k], "header %s", k)
		}
		require.Len(t, d.Headers, 4+len(want), "Ferry's four, the event's, nothing else: %v", d.Headers)
	}

	b.mustPublish(t, one)
	requireHeaders(b.receive(t), one, headers)

	_, err = b.publishBatch(t, batch...)
	require.NoError(t, err)
	got := b.mq.Collect(t, 2, 5*time.Second)
	require.Len(t, got, 2)
	requireHeaders(got[0], batch[0], headers)
	requireHeaders(got[1], batch[1], nil)

	_, err = b.env(t).ExecuteActivity(workflows.ReplayActivity, workflows.ReplayEventInput{
		RequestID: "rp/" + one.ID, EventID: one.ID, Reason: "consumer lost its data", Actor: "ops"})
	require.NoError(t, err)
	requireHeaders(b.receive(t), one, headers)
}

// A row written around the schema's check (the constraint dropped) cannot
// override Ferry's headers, nor set RabbitMQ's or the trace context:
// Ferry's values are sent, the reserved ones dropped, the rest kept, and
// one warning names them, never their values.
func TestReservedEventHeadersNeverOverrideFerrys(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	_, err := b.db.Pool.Exec(context.Background(), `ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_headers_valid`)
	require.NoError(t, err)
	ev := insert(t, b.db.Pool, "order", "r-1", row{Headers: `{
		"ferry-aggregate-id": "evil-id", "ferry-aggregate-version": "99", "FERRY-Aggregate-Type": "evil-type",
		"x-delivery-count": "98", "message_id": "evil-mid", "tenant": "acme", "n": 7}`})

	logs := &ferrytest.Buffer{}
	var s testsuite.WorkflowTestSuite
	s.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(logs, nil))))
	env := s.NewTestActivityEnvironment()
	b.acts.Register(env, b.settings)
	_, err = env.ExecuteActivity(workflows.PublishEventActivity, ev.input())
	require.NoError(t, err)

	d := b.receive(t)
	requireFerryHeaders(t, d, ev)
	require.Equal(t, amqp.Table{
		broker.HeaderAggregateType:    "order",
		broker.HeaderAggregateID:      "r-1",
		broker.HeaderAggregateVersion: int64(1),
		broker.HeaderSchemaVersion:    int64(1),
		"tenant":                      "acme",
		"n":                           "7",
	}, d.Headers)

	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "event headers with reserved names dropped"), "one warning: %s", out)
	for _, name := range []string{"ferry-aggregate-id", "ferry-aggregate-version", "FERRY-Aggregate-Type", "x-delivery-count", "message_id"} {
		require.Contains(t, out, name)
	}
	for _, value := range []string{"evil-id", "evil-type", "evil-mid"} {
		require.NotContains(t, out, value)
	}
}

// A delayed event's message says when it became due (ferry-due-at, its
// deliver_after), and so does the event held behind it on its aggregate
// (the schema gives it the same deliver_after); an event that was never
// delayed has no such header (TestPublishedMessagesCarryTheEventsHeaders
// counts every header of one). A producer's own ferry-due-at is refused by
// the schema and dropped if written around it.
func TestDelayedEventsSayWhenTheyBecameDue(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	ctx := context.Background()
	var due time.Time
	delayed := event{AggregateType: "order", AggregateID: "d-1"}
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, deliver_after)
		VALUES ('order', 'd-1', 'reminder', '{}', now() + interval '90 seconds')
		RETURNING id::text, aggregate_version, deliver_after`).Scan(&delayed.ID, &delayed.Version, &due))
	held := insert(t, b.db.Pool, "order", "d-1", row{})

	// The activities publish what they are handed: the relay alone waits
	// for the due time, so these go at once.
	for _, ev := range []event{delayed, held} {
		b.mustPublish(t, ev)
		d := b.receive(t)
		requireFerryHeaders(t, d, ev)
		got, ok := d.Headers[broker.HeaderDueAt].(time.Time)
		require.True(t, ok, "%s: %s is %T, want a timestamp", ev.ID, broker.HeaderDueAt, d.Headers[broker.HeaderDueAt])
		require.True(t, got.Equal(due.Truncate(time.Second)), "%s: due at %s, want %s (AMQP timestamps have whole seconds)", ev.ID, got, due)
	}

	_, err := b.db.Pool.Exec(ctx, `ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_headers_valid`)
	require.NoError(t, err)
	forged := insert(t, b.db.Pool, "order", "d-2", row{Headers: `{"ferry-due-at": "2000-01-01T00:00:00Z"}`})
	b.mustPublish(t, forged)
	d := b.receive(t)
	require.NotContains(t, d.Headers, broker.HeaderDueAt)
}
