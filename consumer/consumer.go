package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/internal/startstop"
	"github.com/ferry-outbox/ferry/redact"
	"github.com/ferry-outbox/ferry/upcast"
)

// Config configures a Consumer.
type Config struct {
	// URL of the broker (amqp:// or amqps://). Required.
	URL string
	// Queue is this consumer's durable queue; the consumer also owns
	// <Queue>.retry, <Queue>.dlx and <Queue>.dlq. Every instance of one
	// consumer uses the same Queue (they compete for its messages). Required;
	// 1-200 letters, digits, '_', '.', ':' or '-'.
	Queue string
	// Exchange Ferry publishes to. Default "ferry.events".
	Exchange string
	// Bindings are the routing keys (topic patterns) bound to Queue, e.g.
	// "order.created" or "order.*". Required.
	Bindings []string
	// Inbox applies the events. Required.
	Inbox *inbox.Inbox
	// Handler applies one event in the inbox's transaction. Required.
	Handler inbox.Handler
	// Schemas lifts payloads to the versions Handler reads. Default: an
	// empty registry, so every event type must be at schema version 1.
	Schemas *upcast.Registry
	// Prefetch is the most unacknowledged deliveries in hand. Default 32.
	Prefetch int
	// Concurrency is the number of workers; one aggregate always maps to
	// the same worker. Default 4; at most Prefetch.
	Concurrency int
	// DeliveryLimit is the queue's x-delivery-limit: a message returned this
	// many times is dead-lettered, so a handler sees it at most
	// DeliveryLimit+1 times. Default 20. Part of the queue's declaration:
	// change it on an existing queue with a policy, not here.
	DeliveryLimit int
	// RetryBackoff is the wait before a failed delivery goes back to the
	// queue; it doubles with every delivery up to MaxRetryBackoff. It also
	// paces retries while PostgreSQL is unreachable. Default 200ms.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps RetryBackoff. Default 10s.
	MaxRetryBackoff time.Duration
	// GapRetryDelay is how long an event waiting for an earlier version
	// spends in <Queue>.retry before it is tried again. Default 2s.
	GapRetryDelay time.Duration
	// GapTimeout is how long an event may wait for an earlier version
	// before it is parked in <Queue>.dlq for an operator. Default 5m; at
	// least GapRetryDelay.
	GapTimeout time.Duration
	// HandlerTimeout bounds one inbox transaction, handler included.
	// Default 30s.
	HandlerTimeout time.Duration
	// TracerProvider starts a consumer span per delivery, child of the
	// trace context in the message's traceparent header, and hands its
	// context to the handler. Default: the global provider
	// (otel.GetTracerProvider(); a no-op until one is set).
	TracerProvider trace.TracerProvider
	// ShutdownTimeout bounds how long Stop lets in-flight deliveries
	// finish before their contexts are cancelled. Default 30s.
	ShutdownTimeout time.Duration
	// ReconnectBackoff is the first wait before redialling the broker; it
	// doubles up to MaxReconnectBackoff. Default 200ms.
	ReconnectBackoff time.Duration
	// MaxReconnectBackoff caps ReconnectBackoff. Default 30s.
	MaxReconnectBackoff time.Duration
	// DialTimeout bounds connecting to the broker. Default 10s.
	DialTimeout time.Duration
	// OnResult, when set, observes every delivery's outcome: after it is
	// final in PostgreSQL (or the message is parked) and before the
	// delivery is acknowledged. It runs on the worker; keep it short.
	OnResult func(Result)
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Metrics counts outcomes, dead-lettered messages and commit-to-applied
	// lag, and reads the depth of Queue and <Queue>.dlq at every scrape
	// while the consumer runs. A *metrics.Consumer is one. Default nil:
	// nothing is counted.
	Metrics Metrics
	// Redact masks the values of sensitive payload fields in park reasons
	// (the ferry-parked-reason header), Result.Reason and the consumer's
	// log lines; see package redact. The message body parked in <Queue>.dlq
	// is the original. Result.Err is the handler's own error, unmasked.
	// Default nil: nothing is masked.
	Redact *redact.Redactor
}

// Outcome is what the consumer did with one delivery.
type Outcome string

// Outcomes, in the words of the ordering policy.
const (
	Applied     Outcome = "applied"     // the handler's effect committed
	Duplicate   Outcome = "duplicate"   // event id already applied: acked, no effect
	Stale       Outcome = "stale"       // version ≤ last applied: acked, no effect
	Delayed     Outcome = "delayed"     // gap: sent to <queue>.retry, tried again later
	Retried     Outcome = "retried"     // handler failed: returned to the queue
	Parked      Outcome = "parked"      // gap timeout or last delivery failed: in <queue>.dlq
	Quarantined Outcome = "quarantined" // invalid headers or schema: in <queue>.dlq
)

// Result is one delivery's outcome, for OnResult.
type Result struct {
	Outcome Outcome
	// Event as decoded (and upcast, when that succeeded).
	Event inbox.Event
	// LastApplied is the aggregate's last applied version after the
	// delivery, when the inbox judged it.
	LastApplied int64
	// Reason says why for Delayed, Retried, Parked and Quarantined; it is
	// the ferry-parked-reason header of a parked message.
	Reason string
	// Cause is one of the Cause* values for Parked and Quarantined (the
	// ferry-parked-cause header).
	Cause string
	// Err is the handler's or the decoder's error, if any.
	Err error
	// Deliveries counts this message's deliveries so far, this one included.
	Deliveries int
	// Delivery is the message as received.
	Delivery amqp.Delivery
}

// Stats are counters since New.
type Stats struct {
	Applied, Duplicates, Stale, Delayed, Retried, Parked, Quarantined int64
	// Connects counts sessions established; Consuming says whether one is
	// consuming now.
	Connects  int64
	Consuming bool
}

// Headers the consumer adds to the messages it moves.
const (
	// HeaderGapSince (int64, Unix milliseconds) is when the consumer first
	// saw a gap before this event; it travels with the copy in <queue>.retry.
	HeaderGapSince = "ferry-gap-since"
	// HeaderParkedReason says in words why a message is in <queue>.dlq.
	HeaderParkedReason = "ferry-parked-reason"
	// HeaderParkedCause is one of the Cause* values.
	HeaderParkedCause = "ferry-parked-cause"
	// HeaderParkedBy is the consumer (inbox) name that parked it.
	HeaderParkedBy = "ferry-parked-by"
	// HeaderParkedAt (timestamp) is when it was parked.
	HeaderParkedAt = "ferry-parked-at"
	// HeaderOriginalRoutingKey is the routing key it was published with
	// (set on copies in <queue>.retry and <queue>.dlq).
	HeaderOriginalRoutingKey = "ferry-original-routing-key"
)

// Values of HeaderParkedCause.
const (
	CauseInvalidEvent  = "invalid-event"  // headers missing or malformed
	CauseSchema        = "schema-version" // unknown or invalid schema version, or the upcast failed
	CauseGapTimeout    = "gap-timeout"    // an earlier version never arrived
	CauseHandlerFailed = "handler-failed" // the last allowed delivery failed
)

// Consumer consumes one queue. Start it once; Stop it once or more.
type Consumer struct {
	cfg   Config
	log   *slog.Logger
	topo  topology
	tagID string

	stats struct {
		applied, duplicates, stale, delayed, retried, parked, quarantined, connects atomic.Int64
		consuming                                                                   atomic.Bool
	}

	runner startstop.Runner

	// current is the session consuming now (nil between sessions), for
	// reading queue depths.
	current atomic.Pointer[session]

	// retries holds deliveries waiting out RetryBackoff before their nack.
	retryMu sync.Mutex
	retries map[*time.Timer]func()
}

var queueName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,200}$`)

// New validates cfg and fills its defaults. It does not dial.
func New(cfg Config) (*Consumer, error) {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	cfg.Exchange = cmp.Or(cfg.Exchange, "ferry.events")
	cfg.Prefetch = cmp.Or(cfg.Prefetch, 32)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, min(4, cfg.Prefetch))
	cfg.DeliveryLimit = cmp.Or(cfg.DeliveryLimit, 20)
	cfg.RetryBackoff = cmp.Or(cfg.RetryBackoff, 200*time.Millisecond)
	cfg.MaxRetryBackoff = cmp.Or(cfg.MaxRetryBackoff, 10*time.Second)
	cfg.GapRetryDelay = cmp.Or(cfg.GapRetryDelay, 2*time.Second)
	cfg.GapTimeout = cmp.Or(cfg.GapTimeout, 5*time.Minute)
	cfg.HandlerTimeout = cmp.Or(cfg.HandlerTimeout, 30*time.Second)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, 30*time.Second)
	cfg.ReconnectBackoff = cmp.Or(cfg.ReconnectBackoff, 200*time.Millisecond)
	cfg.MaxReconnectBackoff = cmp.Or(cfg.MaxReconnectBackoff, 30*time.Second)
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, 10*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Schemas == nil {
		cfg.Schemas = upcast.NewRegistry()
	}
	if err := validate(cfg); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &Consumer{
		cfg:     cfg,
		log:     slog.New(cfg.Redact.Handler(cfg.Logger.Handler())).With("component", "consumer", "queue", cfg.Queue, "consumer", cfg.Inbox.Consumer()),
		topo:    newTopology(cfg),
		tagID:   fmt.Sprintf("ferry-consumer-%s-%d", cmp.Or(host, "host"), os.Getpid()),
		retries: map[*time.Timer]func(){},
	}, nil
}

func validate(cfg Config) error {
	u, err := url.Parse(cfg.URL)
	switch {
	case cfg.URL == "":
		return errors.New("consumer: Config.URL is empty")
	case err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps"):
		return errors.New("consumer: Config.URL: must be amqp://… or amqps://…")
	case !queueName.MatchString(cfg.Queue):
		return fmt.Errorf("consumer: Config.Queue %q: use 1-200 letters, digits, '_', '.', ':' or '-'", cfg.Queue)
	case !queueName.MatchString(cfg.Exchange):
		return fmt.Errorf("consumer: Config.Exchange %q: use 1-200 letters, digits, '_', '.', ':' or '-'", cfg.Exchange)
	case len(cfg.Bindings) == 0:
		return errors.New("consumer: Config.Bindings is empty: bind at least one routing key, e.g. \"order.created\"")
	case cfg.Inbox == nil:
		return errors.New("consumer: Config.Inbox is nil")
	case cfg.Handler == nil:
		return errors.New("consumer: Config.Handler is nil")
	case cfg.Prefetch < 1 || cfg.Prefetch > 65535:
		return fmt.Errorf("consumer: Config.Prefetch %d: must be 1 to 65535", cfg.Prefetch)
	case cfg.Concurrency < 1 || cfg.Concurrency > cfg.Prefetch:
		return fmt.Errorf("consumer: Config.Concurrency %d: must be 1 to Prefetch (%d)", cfg.Concurrency, cfg.Prefetch)
	case cfg.DeliveryLimit < 1:
		return fmt.Errorf("consumer: Config.DeliveryLimit %d: must be at least 1", cfg.DeliveryLimit)
	case cfg.RetryBackoff < 0 || cfg.MaxRetryBackoff < cfg.RetryBackoff:
		return fmt.Errorf("consumer: Config.RetryBackoff %s: must be 0 to MaxRetryBackoff (%s)", cfg.RetryBackoff, cfg.MaxRetryBackoff)
	case cfg.GapRetryDelay < time.Millisecond:
		return fmt.Errorf("consumer: Config.GapRetryDelay %s: must be at least 1ms", cfg.GapRetryDelay)
	case cfg.GapTimeout < cfg.GapRetryDelay:
		return fmt.Errorf("consumer: Config.GapTimeout %s: must be at least GapRetryDelay (%s)", cfg.GapTimeout, cfg.GapRetryDelay)
	case cfg.HandlerTimeout <= 0:
		return fmt.Errorf("consumer: Config.HandlerTimeout %s: must be positive", cfg.HandlerTimeout)
	case cfg.ShutdownTimeout <= 0:
		return fmt.Errorf("consumer: Config.ShutdownTimeout %s: must be positive", cfg.ShutdownTimeout)
	case cfg.ReconnectBackoff <= 0 || cfg.MaxReconnectBackoff < cfg.ReconnectBackoff:
		return fmt.Errorf("consumer: Config.ReconnectBackoff %s: must be positive and at most MaxReconnectBackoff (%s)", cfg.ReconnectBackoff, cfg.MaxReconnectBackoff)
	case cfg.DialTimeout <= 0:
		return fmt.Errorf("consumer: Config.DialTimeout %s: must be positive", cfg.DialTimeout)
	}
	return nil
}

// Queues names the queues the consumer declares.
type Queues struct {
	Main, Retry, DeadLetter, DeadLetterExchange string
}

// Queues returns the names of the consumer's queues.
func (c *Consumer) Queues() Queues {
	return Queues{Main: c.topo.queue, Retry: c.topo.retry, DeadLetter: c.topo.dlq, DeadLetterExchange: c.topo.dlx}
}

// Stats returns the counters.
func (c *Consumer) Stats() Stats {
	return Stats{
		Applied:     c.stats.applied.Load(),
		Duplicates:  c.stats.duplicates.Load(),
		Stale:       c.stats.stale.Load(),
		Delayed:     c.stats.delayed.Load(),
		Retried:     c.stats.retried.Load(),
		Parked:      c.stats.parked.Load(),
		Quarantined: c.stats.quarantined.Load(),
		Connects:    c.stats.connects.Load(),
		Consuming:   c.stats.consuming.Load(),
	}
}

// Declare connects once and declares the exchange, the queues and the
// bindings, then disconnects. Start does the same on every connect; call
// Declare to fail early (a queue of that name declared with other
// arguments, a broker that is unreachable) or to bind the queue before
// anything is published.
func (c *Consumer) Declare(ctx context.Context) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("consumer: open channel: %w", err)
	}
	if err := c.topo.declare(ch); err != nil {
		return err
	}
	return ctx.Err()
}

// Start consumes in the background until Stop, reconnecting with backoff
// whenever the broker goes away. It returns at once.
func (c *Consumer) Start(ctx context.Context) error {
	if err := c.runner.Start(ctx, c.run); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	c.cfg.Metrics.WatchQueues(c.cfg.Inbox.Consumer(), c.queueDepths)
	return nil
}

// Stop stops taking deliveries, lets the ones in hand finish (at most
// ShutdownTimeout; then their contexts are cancelled and the broker
// redelivers whatever was not acknowledged), and closes the connection. Safe
// to call more than once.
func (c *Consumer) Stop() {
	if c.runner.Stop() {
		c.cfg.Metrics.Unwatch(c.cfg.Inbox.Consumer())
	}
}

// queueDepths reads the messages ready in Queue and <Queue>.dlq on a
// channel of its own (a failed passive declare closes its channel). The
// client's calls take no context, so a broker that does not answer is left
// behind when ctx ends, not waited for.
func (c *Consumer) queueDepths(ctx context.Context) (map[string]int, error) {
	s := c.current.Load()
	if s == nil || !s.alive() {
		return nil, errors.New("consumer: not connected")
	}
	type answer struct {
		depths map[string]int
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		ch, err := s.conn.Channel()
		if err != nil {
			done <- answer{err: fmt.Errorf("consumer: open channel: %w", err)}
			return
		}
		defer ch.Close()
		depths := map[string]int{}
		for _, name := range []string{c.topo.queue, c.topo.dlq} {
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			if err != nil {
				done <- answer{err: fmt.Errorf("consumer: inspect queue %q: %w", name, err)}
				return
			}
			depths[name] = q.Messages
		}
		done <- answer{depths: depths}
	}()
	select {
	case a := <-done:
		return a.depths, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("consumer: read queue depths: %w", ctx.Err())
	}
}
