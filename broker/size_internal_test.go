package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
)

func body(n int) []byte { return []byte(`"` + strings.Repeat("x", n-2) + `"`) }

// A message over MaxMessageBytes never goes on the wire and costs the
// other publishers nothing: the session (connection and channel) stays,
// the messages before it in a batch are published, none after it.
func TestTooLargeIsRefusedUnsentAndKeepsTheSession(t *testing.T) {
	t.Parallel()
	b := ferrytest.NewBroker(t, "")
	p, err := New(Config{URL: b.URL, Exchange: b.Exchange, MaxMessageBytes: 1024})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	ctx := context.Background()
	m := func(id string, size int) Message { return Message{ID: id, RoutingKey: "k", Body: body(size)} }

	require.NoError(t, p.Publish(ctx, m("at-the-limit", 1024)))
	sess := p.cur

	err = p.Publish(ctx, m("too-large", 1025))
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorContains(t, err, "message too-large is 1025 bytes, over the limit of 1024")
	require.Same(t, sess, p.cur, "no reset for a message that was never sent")
	require.True(t, sess.usable())

	n, err := p.PublishBatch(ctx, []Message{m("b1", 10), m("b2", 10), m("b3-too-large", 2000), m("b4", 10)})
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorContains(t, err, "b3-too-large is 2000 bytes")
	require.Equal(t, 2, n, "the messages before it are published")
	require.Same(t, sess, p.cur)

	var got []string
	for _, d := range b.Collect(t, 3, 5*time.Second) {
		got = append(got, d.MessageId)
	}
	require.Equal(t, []string{"at-the-limit", "b1", "b2"}, got)
	_, more := b.Get(t, 200*time.Millisecond)
	require.False(t, more, "nothing after the refused message was sent")
}

// A message that can never be sent says so even when the broker is down,
// rather than passing for an outage.
func TestTooLargeWithoutABroker(t *testing.T) {
	t.Parallel()
	p, err := New(Config{URL: "amqp://guest:guest@" + ferrytest.ClosedAddr(t) + "/", MaxMessageBytes: 1024})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	err = p.Publish(context.Background(), Message{ID: "big", Body: body(1025)})
	require.ErrorIs(t, err, ErrTooLarge)
	require.NotErrorIs(t, err, ErrUnavailable)
}

// A channel exception closes the channel, not the connection: the
// publishes on it fail with the broker's reason, and the next publish
// opens a channel on the same connection instead of redialling. Deleting
// the exchange under the Publisher makes the broker close the channel with
// 404 NOT_FOUND.
func TestChannelExceptionKeepsTheConnection(t *testing.T) {
	t.Parallel()
	b := ferrytest.NewBroker(t, "")
	p, err := New(Config{URL: b.URL, Exchange: b.Exchange})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	ctx := context.Background()
	require.NoError(t, p.Publish(ctx, Message{ID: "before", RoutingKey: "k", Body: body(10)}))
	sess := p.cur

	admin, err := amqp.Dial(b.URL)
	require.NoError(t, err)
	defer admin.Close()
	ch, err := admin.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDelete(b.Exchange, false, false))

	err = p.Publish(ctx, Message{ID: "lost", RoutingKey: "k", Body: body(10)})
	require.ErrorIs(t, err, ErrUnavailable, "an outage of the exchange, not of the message")
	require.ErrorContains(t, err, "404 NOT_FOUND - no exchange")
	var reason *amqp.Error
	require.ErrorAs(t, err, &reason)
	require.Equal(t, amqp.NotFound, reason.Code)
	require.False(t, sess.conn.IsClosed(), "the connection outlives the channel")

	// The next publish declares the exchange again on a new channel of the
	// same connection; the test's queue binding went with the exchange.
	require.NoError(t, ch.ExchangeDeclare(b.Exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	require.NoError(t, ch.QueueBind(b.Queue, "#", b.Exchange, false, nil))
	require.NoError(t, p.Publish(ctx, Message{ID: "after", RoutingKey: "k", Body: body(10)}))
	require.NotSame(t, sess, p.cur)
	require.Same(t, sess.conn, p.cur.conn, "no redial")
}

// How a lost confirm is classified by the channel's close reason.
func TestClosedBeforeConfirm(t *testing.T) {
	t.Parallel()
	refused := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - message size 70000 is larger than configured max size 65536", Server: true, Recover: true}
	for _, tt := range []struct {
		name   string
		size   int
		reason *amqp.Error
		want   error
		text   string
	}{
		{"the refused message", 70000, refused, ErrRefused,
			"message refused by broker: m (70000 bytes): 406 PRECONDITION_FAILED - message size 70000 is larger than configured max size 65536"},
		{"a bystander on the same channel", 10, refused, ErrUnavailable,
			"broker unavailable: channel closed before the confirm of m, the broker refusing another message on it: 406 PRECONDITION_FAILED - message size 70000"},
		{"a 406 that names no message", 10, &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - invalid expiration", Server: true, Recover: true}, ErrRefused,
			"406 PRECONDITION_FAILED - invalid expiration"},
		{"the broker closing the connection", 10, &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'", Server: true}, ErrUnavailable,
			"channel closed before the confirm of m: 320 CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"},
		{"a lost connection", 10, &amqp.Error{Code: amqp.FrameError, Reason: "read tcp 127.0.0.1:1->127.0.0.1:5672: read: connection reset by peer"}, ErrUnavailable,
			"501 read tcp"},
		{"no reason", 10, nil, ErrUnavailable, "channel closed before the confirm of m"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := closedBeforeConfirm(Message{ID: "m", Body: make([]byte, tt.size)}, tt.reason)
			require.ErrorIs(t, err, tt.want)
			require.ErrorContains(t, err, tt.text)
			if tt.reason != nil {
				var reason *amqp.Error
				require.ErrorAs(t, err, &reason)
				require.Same(t, tt.reason, reason)
			}
		})
	}
}
