package consumer_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/inbox"
)

// The handler reads the producer's event headers in inbox.Event.Headers:
// the string headers a producer may set, never Ferry's, RabbitMQ's or the
// trace context, also after a gap sent the message through <queue>.retry
// (which adds a header of the consumer's own).
func TestHandlerSeesTheProducersHeaders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var (
		mu   sync.Mutex
		seen = map[string]map[string]string{}
	)
	c := e.config(func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		mu.Lock()
		seen[ev.ID] = ev.Headers
		mu.Unlock()
		return record(ctx, tx, ev)
	})
	var res results
	c.OnResult = res.add
	c.Concurrency = 1
	e.start(c)

	producer := amqp.Table{"tenant": "acme", "Correlation.ID": "c-1"}
	withExtra := func(m msg, extra amqp.Table) msg {
		m.extra = amqp.Table{}
		for k, v := range producer {
			m.extra[k] = v
		}
		for k, v := range extra {
			m.extra[k] = v
		}
		return m
	}
	// Version 2 first: it waits in <queue>.retry for version 1.
	e.publish(withExtra(order("b", "7", 2), amqp.Table{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}))
	e.publish(withExtra(order("a", "7", 1), amqp.Table{"count": int64(3), "blob": []byte("x")}))
	e.publish(order("c", "7", 3))
	e.waitEffects("a@v1", "b@v2", "c@v3")
	require.Contains(t, res.outcomes(), "b@v2:delayed", "b went through the retry queue")

	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{"tenant": "acme", "Correlation.ID": "c-1"}
	require.Equal(t, want, seen["a"], "non-string headers are not the producer's")
	require.Equal(t, want, seen["b"], "the trace context and the retry's ferry-gap-since are Ferry's")
	require.Nil(t, seen["c"], "no producer headers: nil")
}
