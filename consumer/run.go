package consumer

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/internal/backoff"
)

type job struct {
	d    amqp.Delivery
	sess *session
}

func (c *Consumer) run(ctx context.Context) {
	// work is what the workers run under: it outlives ctx by up to
	// ShutdownTimeout so that deliveries in hand can finish after Stop.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	queues := make([]chan job, c.cfg.Concurrency)
	var workers sync.WaitGroup
	for i := range queues {
		// Buffered for the whole prefetch window, so dispatching never
		// waits for a busy worker while others idle.
		queues[i] = make(chan job, c.cfg.Prefetch)
		workers.Go(func() {
			for j := range queues[i] {
				c.handle(ctx, work, j)
			}
		})
	}
	dispatch := func(j job) { queues[c.worker(j.d)] <- j }

	var last *session
	failures := 0
	for ctx.Err() == nil {
		sess, deliveries, err := c.connect()
		if err != nil {
			failures++
			wait := backoff.Exponential(c.cfg.ReconnectBackoff, c.cfg.MaxReconnectBackoff, failures)
			c.log.Warn("cannot consume; retrying", "error", err, "retry_in", wait)
			sleep(ctx, wait)
			continue
		}
		failures = 0
		last = sess
		c.current.Store(sess)
		c.stats.connects.Add(1)
		c.stats.consuming.Store(true)
		c.log.Info("consuming", "bindings", c.cfg.Bindings, "exchange", c.cfg.Exchange, "prefetch", c.cfg.Prefetch)
		lost := c.pump(ctx, deliveries, sess, dispatch)
		c.stats.consuming.Store(false)
		c.current.Store(nil)
		if lost {
			c.log.Warn("connection to the broker lost; unacknowledged deliveries return to the queue; reconnecting")
			sess.close()
			sleep(ctx, backoff.Exponential(c.cfg.ReconnectBackoff, c.cfg.MaxReconnectBackoff, 1))
			continue
		}
		// Stopping: no new deliveries; the ones already received are in
		// hand and are handled (the channel closes after them).
		if err := sess.ch.Cancel(sess.tag, false); err == nil {
			for d := range deliveries {
				dispatch(job{d: d, sess: sess})
			}
		}
	}

	for _, q := range queues {
		close(q)
	}
	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(c.cfg.ShutdownTimeout):
		c.log.Warn("in-flight deliveries did not finish within the shutdown timeout; cancelling them (the broker redelivers them)",
			"timeout", c.cfg.ShutdownTimeout)
		cancelWork()
		<-finished
	}
	c.flushRetries()
	if last != nil {
		last.close()
	}
	c.log.Info("stopped")
}

// pump hands deliveries to the workers until ctx ends (false) or the
// session is lost (true).
func (c *Consumer) pump(ctx context.Context, deliveries <-chan amqp.Delivery, sess *session, dispatch func(job)) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-sess.closed:
			return true
		case d, ok := <-deliveries:
			if !ok {
				return true
			}
			dispatch(job{d: d, sess: sess})
		}
	}
}

// worker maps a delivery to a worker by aggregate, so one aggregate's
// deliveries are handled in arrival order.
func (c *Consumer) worker(d amqp.Delivery) int {
	h := fnv.New32a()
	t, _ := d.Headers[broker.HeaderAggregateType].(string)
	id, _ := d.Headers[broker.HeaderAggregateID].(string)
	if t == "" && id == "" {
		id = d.MessageId
	}
	_, _ = h.Write([]byte(t))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(c.cfg.Concurrency))
}

// retryLater nacks d with requeue after wait, unless the consumer stops
// first (then at once).
func (c *Consumer) retryLater(d amqp.Delivery, wait time.Duration) {
	c.retryMu.Lock()
	defer c.retryMu.Unlock()
	var once sync.Once
	nack := func() { once.Do(func() { _ = d.Nack(false, true) }) }
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		c.retryMu.Lock()
		delete(c.retries, t)
		c.retryMu.Unlock()
		nack()
	})
	c.retries[t] = nack
}

func (c *Consumer) flushRetries() {
	c.retryMu.Lock()
	pending := c.retries
	c.retries = map[*time.Timer]func(){}
	c.retryMu.Unlock()
	for t, nack := range pending {
		t.Stop()
		nack()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
