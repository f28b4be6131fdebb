package broker_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/broker"
)

// Returns are taken by their own message id, once; a closed channel (its
// AMQP channel went away) ends the reading instead of spinning on it.
func TestReturnsTakeByID(t *testing.T) {
	t.Parallel()
	ch := make(chan amqp.Return, 4)
	r := broker.NewReturns(ch)
	ch <- amqp.Return{MessageId: "a", ReplyCode: 312}
	ch <- amqp.Return{MessageId: "b", ReplyCode: 312}

	got, ok := r.Take("b")
	require.True(t, ok)
	require.Equal(t, "b", got.MessageId)
	_, ok = r.Take("b")
	require.False(t, ok, "a return is taken once")
	_, ok = r.Take("c")
	require.False(t, ok)

	close(ch)
	got, ok = r.Take("a")
	require.True(t, ok, "returns read before the close are kept")
	require.Equal(t, "a", got.MessageId)
	_, ok = r.Take("a")
	require.False(t, ok)
}
