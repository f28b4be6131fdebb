package ferrytest

import (
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// AMQPURL is the broker NewBroker declares on when given no URL:
// FERRY_TEST_AMQP_URL, else DefaultAMQPURL.
func AMQPURL() string {
	if v := os.Getenv("FERRY_TEST_AMQP_URL"); v != "" {
		return v
	}
	return DefaultAMQPURL
}

// Broker is one test's RabbitMQ exchange with a queue bound to every
// routing key of it: point a relay at URL and Exchange (relaytest.Start does)
// and read what it published off Queue.
type Broker struct {
	URL      string
	Exchange string
	Queue    string
	conn     *amqp.Connection
	ch       *amqp.Channel
}

// NewBroker declares a unique durable topic exchange and a durable queue
// bound to it with "#" on the broker at amqpURL ("": AMQPURL). Both are
// deleted at the test's cleanup. Being durable, they outlive a restart of
// the broker; Get and Collect need the connection they were declared on,
// which a restart closes.
func NewBroker(tb testing.TB, amqpURL string) *Broker {
	tb.Helper()
	if amqpURL == "" {
		amqpURL = AMQPURL()
	}
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		tb.Fatalf("ferrytest: RabbitMQ is required at %s and did not answer: %v\n"+
			"  start it, or pass NewBroker the URL of a broker for tests (an empty URL reads FERRY_TEST_AMQP_URL)", redact(amqpURL), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("ferrytest: open a channel: %v", err)
	}
	b := &Broker{URL: amqpURL, Exchange: Name("ferry.test"), Queue: Name("ferry.test.q"), conn: conn, ch: ch}
	if err := ch.ExchangeDeclare(b.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		tb.Fatalf("ferrytest: declare exchange %s: %v", b.Exchange, err)
	}
	if _, err := ch.QueueDeclare(b.Queue, true, false, false, false, nil); err != nil {
		tb.Fatalf("ferrytest: declare queue %s: %v", b.Queue, err)
	}
	if err := ch.QueueBind(b.Queue, "#", b.Exchange, false, nil); err != nil {
		tb.Fatalf("ferrytest: bind queue %s: %v", b.Queue, err)
	}
	tb.Cleanup(func() {
		_, _ = ch.QueueDelete(b.Queue, false, false, false)
		_ = ch.ExchangeDelete(b.Exchange, false, false)
		_ = conn.Close()
	})
	return b
}

// Get takes one message off the test queue, waiting up to timeout; false
// when none came.
func (b *Broker) Get(tb testing.TB, timeout time.Duration) (amqp.Delivery, bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d, ok, err := b.ch.Get(b.Queue, true)
		if err != nil {
			tb.Fatalf("ferrytest: get from %s: %v", b.Queue, err)
		}
		if ok {
			return d, true
		}
		if time.Now().After(deadline) {
			return amqp.Delivery{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Collect takes messages off the test queue until n have arrived or
// timeout passes, and returns what arrived.
func (b *Broker) Collect(tb testing.TB, n int, timeout time.Duration) []amqp.Delivery {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var out []amqp.Delivery
	for len(out) < n {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		d, ok := b.Get(tb, left)
		if !ok {
			break
		}
		out = append(out, d)
	}
	return out
}

// Channel is the channel the exchange and the queue were declared on, for
// a test's own topology.
func (b *Broker) Channel(tb testing.TB) *amqp.Channel { return b.ch }

// Bind binds the test queue to routingKey on the test exchange.
func (b *Broker) Bind(tb testing.TB, routingKey string) {
	tb.Helper()
	if err := b.ch.QueueBind(b.Queue, routingKey, b.Exchange, false, nil); err != nil {
		tb.Fatalf("ferrytest: bind %s to %q: %v", b.Queue, routingKey, err)
	}
}

// Unbind removes the binding of the test queue to routingKey (its "#"
// binding too, when routingKey is "#": the exchange then routes nothing).
func (b *Broker) Unbind(tb testing.TB, routingKey string) {
	tb.Helper()
	if err := b.ch.QueueUnbind(b.Queue, routingKey, b.Exchange, nil); err != nil {
		tb.Fatalf("ferrytest: unbind %s from %q: %v", b.Queue, routingKey, err)
	}
}

// DeleteConsumerTopology deletes what a consumer of queue declares
// (package consumer): the queue, its .retry and .dlq queues and its .dlx
// exchange. Errors are ignored: cleanup of what may not exist.
func DeleteConsumerTopology(ch *amqp.Channel, queue string) {
	for _, q := range []string{queue, queue + ".retry", queue + ".dlq"} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(queue+".dlx", false, false)
}
