package activities_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

// refusedBody is the size of the payloads below; the private node takes
// at most nodeMaxMessage, Ferry's own limit stays at its 16 MiB default.
const (
	nodeMaxMessage = 64 << 10
	refusedBody    = 70000
)

// When the broker takes less than Ferry's limit, it closes the channel for
// the message (406 PRECONDITION_FAILED). What it said is what the error,
// the row and the log say, and it is classified by it: the refused event
// fails for good, the others in flight are retried, and the connection
// stays up for every other aggregate. One private node (max_message_size
// 64 KiB) serves the subtests, in order.
func TestBrokerRefusal(t *testing.T) {
	t.Parallel()
	node := startRabbitNode(t, fmt.Sprintf("max_message_size = %d", nodeMaxMessage))
	exchange, queue := ferrytest.Name("ferry.test"), ferrytest.Name("ferry.test.q")
	admin, err := amqp.Dial(node.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	ach, err := admin.Channel()
	require.NoError(t, err)
	require.NoError(t, ach.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	_, err = ach.QueueDeclare(queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ach.QueueBind(queue, "#", exchange, false, nil))
	received := func(t *testing.T) []string {
		t.Helper()
		var ids []string
		for {
			d, ok, err := ach.Get(queue, true)
			require.NoError(t, err)
			if !ok {
				return ids
			}
			ids = append(ids, d.MessageId)
		}
	}

	pub := newPublisher(t, broker.Config{URL: node.URL, Exchange: exchange})
	b := setup(t, activities.Config{}, pub)
	var logs ferrytest.Buffer
	env := func() *testsuite.TestActivityEnvironment {
		var s testsuite.WorkflowTestSuite
		s.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		env := s.NewTestActivityEnvironment()
		b.acts.Register(env, workflows.Settings{})
		return env
	}
	wantReason := fmt.Sprintf("406 PRECONDITION_FAILED - message size %d is larger than configured max size %d", refusedBody, nodeMaxMessage)

	t.Run("the refused event fails for good with the broker's reason", func(t *testing.T) {
		big := insert(t, b.db.Pool, "order", "o-1", row{Payload: jsonOf(refusedBody)})
		_, err := env().ExecuteActivity(workflows.PublishEventActivity, big.input())

		appErr := appError(t, err)
		require.Equal(t, activities.ErrTypeRefused, appErr.Type(), "never an outage (BrokerUnavailable)")
		require.True(t, appErr.NonRetryable(), "the broker refuses it again: quarantine at once")
		require.Contains(t, appErr.Error(), wantReason)
		require.Contains(t, appErr.Error(), big.ID)
		r := readRow(t, b.db.Pool, big.ID)
		require.NotNil(t, r.LastError)
		require.Contains(t, *r.LastError, wantReason)
		require.Contains(t, logs.String(), wantReason, "the worker's log says it too")
		require.Empty(t, received(t))

		// The next event goes out on the same connection.
		small := insert(t, b.db.Pool, "order", "o-2", row{})
		_, err = env().ExecuteActivity(workflows.PublishEventActivity, small.input())
		require.NoError(t, err)
		require.Equal(t, []string{small.ID}, received(t))
		require.Equal(t, 1, strings.Count(node.ctl(t, "list_connections", "client_properties"), "ferry-publisher"),
			"one connection: the refusal cost a channel, not a redial")
	})

	t.Run("the fast path stops at it", func(t *testing.T) {
		// A routing key not seen yet: the first event waits for its own
		// confirm before the refused one is sent.
		first := insert(t, b.db.Pool, "invoice", "i-1", row{})
		big := insert(t, b.db.Pool, "invoice", "i-1", row{Payload: jsonOf(refusedBody)})
		after := insert(t, b.db.Pool, "invoice", "i-1", row{})
		in := workflows.PublishBatchInput{AggregateType: "invoice", AggregateID: "i-1"}
		for _, ev := range []event{first, big, after} {
			in.Events = append(in.Events, workflows.EventRef{ID: ev.ID, Version: ev.Version, Type: "created"})
		}
		val, err := env().ExecuteActivity(workflows.PublishBatchActivity, in)
		require.NoError(t, err)
		var res workflows.PublishBatchResult
		require.NoError(t, val.Get(&res))
		require.Equal(t, 1, res.Published)
		require.Contains(t, res.Stopped, wantReason)
		require.Contains(t, *readRow(t, b.db.Pool, big.ID).LastError, wantReason)
		require.Equal(t, []string{first.ID}, received(t))

		in.Events = in.Events[1:]
		_, err = env().ExecuteActivity(workflows.PublishBatchActivity, in)
		appErr := appError(t, err)
		require.Equal(t, activities.ErrTypeRefused, appErr.Type())
		require.True(t, appErr.NonRetryable())
	})

	t.Run("messages in flight beside it are retried, not refused", func(t *testing.T) {
		// Known routing key: everything is pipelined, so messages before
		// the refused one are still unconfirmed when the channel closes.
		ctx := context.Background()
		require.NoError(t, pub.Publish(ctx, broker.Message{ID: ferrytest.Name("warm"), RoutingKey: "k", Body: []byte(`{}`)}))
		var msgs []broker.Message
		for i := range 50 {
			msgs = append(msgs, broker.Message{ID: fmt.Sprintf("small-%02d", i), RoutingKey: "k", Body: []byte(`{}`)})
		}
		msgs = append(msgs, broker.Message{ID: "big", RoutingKey: "k", Body: []byte(jsonOf(refusedBody))})
		n, err := pub.PublishBatch(ctx, msgs)
		if n < 50 {
			require.ErrorIs(t, err, broker.ErrUnavailable, "message %s is a bystander", msgs[n].ID)
			require.ErrorContains(t, err, "the broker refusing another message on it: "+wantReason)
		} else {
			require.ErrorIs(t, err, broker.ErrRefused)
			require.ErrorContains(t, err, "big (70000 bytes): "+wantReason)
		}
		t.Logf("%d of the 50 messages before the refused one were confirmed before the channel closed", n)

		// Retried, the bystanders go out; the refused one is refused again.
		got, err := pub.PublishBatch(ctx, msgs[n:50])
		require.NoError(t, err)
		require.Equal(t, 50-n, got)
		err = pub.Publish(ctx, msgs[50])
		require.ErrorIs(t, err, broker.ErrRefused)

		// At least once: a message whose confirm was lost may be queued
		// already, and its retry duplicates it (consumers deduplicate by id).
		seen := map[string]bool{}
		for _, id := range received(t) {
			seen[id] = true
		}
		require.Len(t, seen, 1+50, "the warm-up and all 50, and never the refused one")
		require.False(t, seen["big"])
	})
}
