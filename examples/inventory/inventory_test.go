package inventory_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/examples/inventory"
	"github.com/ferry-outbox/ferry/ferrytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The example as `ferry dev` runs it: it reserves stock for order.created
// (schema v1 from the demo producer, upcast to v2), confirms it on
// order.paid, and prints the duplicate it is sent on purpose.
func TestExampleAppliesOnceAndPrintsDuplicates(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	b := ferrytest.NewBroker(t, "")
	queue := ferrytest.Name("inventory.orders")
	conn, err := amqp.Dial(b.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { ferrytest.DeleteConsumerTopology(ch, queue) })

	out := &ferrytest.Buffer{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- inventory.Run(ctx, inventory.Config{
			PostgresURL: db.URL, AMQPURL: b.URL, Exchange: b.Exchange, Queue: queue,
			Out: out, ResendEvery: 1, Logger: slog.New(slog.DiscardHandler),
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.Eventually(t, func() bool {
		probe, err := conn.Channel()
		if err != nil {
			return false
		}
		defer probe.Close()
		q, err := probe.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err == nil && q.Consumers == 1
	}, 15*time.Second, 10*time.Millisecond, "the example never consumed")

	publish := func(id, eventType string, version int64, body string) {
		require.NoError(t, ch.Publish(b.Exchange, "order."+eventType, false, false, amqp.Publishing{
			Headers: amqp.Table{
				broker.HeaderAggregateType: "order", broker.HeaderAggregateID: "42",
				broker.HeaderAggregateVersion: version, broker.HeaderSchemaVersion: int64(1),
			},
			MessageId: id, Type: eventType, DeliveryMode: amqp.Persistent, Body: []byte(body),
		}))
	}
	publish("ev-created", "created", 1, `{"order_id":"42","customer":"customer-7","total_cents":6000}`)
	publish("ev-paid", "paid", 2, `{"order_id":"42"}`)

	require.Eventually(t, func() bool { return bytes.Count([]byte(out.String()), []byte("already applied")) == 2 },
		15*time.Second, 10*time.Millisecond, "output so far:\n%s", out.String())
	var units int
	var status string
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT units, status FROM inventory_reservations WHERE order_id = '42'`).Scan(&units, &status))
	require.Equal(t, 3, units, "v1 payload upcast: one unit per started 25.00")
	require.Equal(t, "confirmed", status)

	cancel()
	require.NoError(t, <-done)
	done <- nil // for the cleanup
	text := out.String()
	require.Contains(t, text, "← applied     order 42  created  v1  reserved 3 unit(s) for customer-7")
	require.Contains(t, text, "← applied     order 42  paid     v2  reservation confirmed")
	require.Contains(t, text, "← duplicate   order 42  created  v1  event ev-created was already applied: acked, no effect")
	require.Contains(t, text, "inventory: stopped after 2 applied, 2 duplicates, 0 stale, 0 parked, 0 quarantined")
}
