package consumer

import (
	"errors"
	"fmt"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferry-outbox/ferry/broker"
)

// topology is the consumer's exchange, queues and bindings.
type topology struct {
	exchange, queue, retry, dlx, dlq string
	bindings                         []string
	deliveryLimit                    int
}

func newTopology(cfg Config) topology {
	return topology{
		exchange:      cfg.Exchange,
		queue:         cfg.Queue,
		retry:         cfg.Queue + ".retry",
		dlx:           cfg.Queue + ".dlx",
		dlq:           cfg.Queue + ".dlq",
		bindings:      cfg.Bindings,
		deliveryLimit: cfg.DeliveryLimit,
	}
}

// declare creates whatever is missing. All queues are quorum queues:
// replicated where the broker is a cluster, and the only kind that counts
// deliveries (x-delivery-limit) on RabbitMQ 3.x. A queue that already exists
// with other arguments fails with PRECONDITION_FAILED, reported as such.
func (t topology) declare(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(t.exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("consumer: declare exchange %q: %w", t.exchange, err)
	}
	if err := ch.ExchangeDeclare(t.dlx, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("consumer: declare dead-letter exchange %q: %w", t.dlx, err)
	}
	queues := []struct {
		name string
		args amqp.Table
	}{
		{t.dlq, amqp.Table{"x-queue-type": "quorum"}},
		{t.queue, amqp.Table{
			"x-queue-type":     "quorum",
			"x-delivery-limit": int64(t.deliveryLimit),
			// The broker dead-letters a message that used up its
			// deliveries, without dropping it on the way: at-least-once
			// dead-lettering (it requires reject-publish overflow, which
			// only matters if someone sets a length limit).
			"x-dead-letter-exchange": t.dlx,
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		}},
		// Gapped events wait here for their per-message expiration, then
		// go back to the main queue through the default exchange.
		{t.retry, amqp.Table{
			"x-queue-type":              "quorum",
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": t.queue,
		}},
	}
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			var aerr *amqp.Error
			if errors.As(err, &aerr) && aerr.Code == amqp.PreconditionFailed {
				return fmt.Errorf("consumer: declare queue %q: it exists with other arguments (%w); delete it or choose another Config.Queue", q.name, err)
			}
			return fmt.Errorf("consumer: declare queue %q: %w", q.name, err)
		}
	}
	if err := ch.QueueBind(t.dlq, "", t.dlx, false, nil); err != nil {
		return fmt.Errorf("consumer: bind %q to %q: %w", t.dlq, t.dlx, err)
	}
	for _, key := range t.bindings {
		if err := ch.QueueBind(t.queue, key, t.exchange, false, nil); err != nil {
			return fmt.Errorf("consumer: bind %q to %q with %q: %w", t.queue, t.exchange, key, err)
		}
	}
	return nil
}

// session is one connection: a consuming channel and a confirm channel for
// the copies the consumer publishes (to <queue>.retry and <queue>.dlx).
type session struct {
	conn   *amqp.Connection
	ch     *amqp.Channel
	pub    *amqp.Channel
	tag    string
	closed chan struct{} // closed when the connection is gone

	returns *broker.Returns
}

var sessionSeq atomic.Int64

func (c *Consumer) dial() (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(c.cfg.URL, amqp.Config{
		Dial:       amqp.DefaultDial(c.cfg.DialTimeout),
		Properties: amqp.Table{"connection_name": "ferry-consumer " + c.cfg.Queue},
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: dial broker: %w", err)
	}
	return conn, nil
}

// connect dials, declares the topology and starts consuming.
func (c *Consumer) connect() (*session, <-chan amqp.Delivery, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, nil, err
	}
	s := &session{conn: conn, closed: make(chan struct{})}
	notify := conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		<-notify
		close(s.closed)
	}()
	deliveries, err := s.open(c)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	return s, deliveries, nil
}

func (s *session) open(c *Consumer) (<-chan amqp.Delivery, error) {
	var err error
	if s.ch, err = s.conn.Channel(); err != nil {
		return nil, fmt.Errorf("consumer: open channel: %w", err)
	}
	if err := c.topo.declare(s.ch); err != nil {
		return nil, err
	}
	if err := s.ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("consumer: set prefetch: %w", err)
	}
	if s.pub, err = s.conn.Channel(); err != nil {
		return nil, fmt.Errorf("consumer: open publish channel: %w", err)
	}
	if err := s.pub.Confirm(false); err != nil {
		return nil, fmt.Errorf("consumer: enable confirms: %w", err)
	}
	// Buffered so the client's reader never blocks on it: a return only
	// happens if someone deleted our queues, and each publish drains it.
	s.returns = broker.NewReturns(s.pub.NotifyReturn(make(chan amqp.Return, 256)))
	s.tag = fmt.Sprintf("%s-%d", c.tagID, sessionSeq.Add(1))
	deliveries, err := s.ch.Consume(c.cfg.Queue, s.tag, false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consumer: consume %q: %w", c.cfg.Queue, err)
	}
	return deliveries, nil
}

func (s *session) alive() bool {
	select {
	case <-s.closed:
		return false
	default:
		return true
	}
}

// close closes the connection and waits until the client has let go of it.
func (s *session) close() {
	_ = s.conn.Close()
	<-s.closed
}

// publish sends msg with mandatory routing and waits for the broker's
// confirm. A message the broker could not route is an error: it would
// otherwise be acknowledged and lost.
func (s *session) publish(exchange, key string, msg amqp.Publishing) error {
	dc, err := s.pub.PublishWithDeferredConfirm(exchange, key, true, false, msg)
	if err != nil {
		return fmt.Errorf("publish to %q: %w", cmpName(exchange, key), err)
	}
	acked := dc.Wait()
	if r, ok := s.returns.Take(msg.MessageId); ok {
		return fmt.Errorf("publish to %q: returned unroutable: %d %s", cmpName(exchange, key), r.ReplyCode, r.ReplyText)
	}
	if !acked {
		return fmt.Errorf("publish to %q: not confirmed by the broker", cmpName(exchange, key))
	}
	return nil
}

func cmpName(exchange, key string) string {
	if exchange == "" {
		return key
	}
	return exchange
}
