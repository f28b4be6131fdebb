package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newPublisher builds a Publisher for cfg and closes it at cleanup.
func newPublisher(t *testing.T, cfg broker.Config) *broker.Publisher {
	t.Helper()
	p, err := broker.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// adminChannel is the test's own AMQP channel, for declaring and inspecting
// what the Publisher must not do itself (queues, bindings).
func adminChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(ferrytest.AMQPURL())
	require.NoError(t, err, "RabbitMQ is required at %s", broker.Redact(ferrytest.AMQPURL()))
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// freshExchange names an exchange that does not exist yet (the Publisher
// declares it) and deletes it at cleanup.
func freshExchange(t *testing.T, ch *amqp.Channel) string {
	t.Helper()
	name := ferrytest.Name("ferry.test.fresh")
	t.Cleanup(func() { _ = ch.ExchangeDelete(name, false, false) })
	return name
}

// boundQueue declares a queue bound to exchange with key, deleted at cleanup.
func boundQueue(t *testing.T, ch *amqp.Channel, exchange, key string, args amqp.Table) string {
	t.Helper()
	q := ferrytest.Name("ferry.test.q")
	_, err := ch.QueueDeclare(q, true, false, false, false, args)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	require.NoError(t, ch.QueueBind(q, key, exchange, false, nil))
	return q
}

// viaProxy is the test broker's URL with its host:port replaced by addr.
func viaProxy(t *testing.T, addr string) string {
	t.Helper()
	u, err := url.Parse(ferrytest.AMQPURL())
	require.NoError(t, err)
	u.Host = addr
	return u.String()
}

func amqpHostPort(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(ferrytest.AMQPURL())
	require.NoError(t, err)
	if u.Port() == "" {
		return u.Hostname() + ":5672"
	}
	return u.Host
}

func msg(id, key string) broker.Message {
	return broker.Message{ID: id, Type: "test.event", RoutingKey: key, Body: []byte(`{"id":"` + id + `"}`)}
}

func TestPublishDeliversConfirmedMessage(t *testing.T) {
	t.Parallel()
	b := ferrytest.NewBroker(t, "")
	p := newPublisher(t, broker.Config{URL: b.URL, Exchange: b.Exchange})
	ctx := context.Background()

	id := ferrytest.Name("evt")
	ts := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	sent := broker.Message{
		ID:         id,
		Type:       "order.placed",
		RoutingKey: "order.placed",
		Headers:    amqp.Table{broker.HeaderAggregateID: "o-1", broker.HeaderAggregateVersion: int64(7)},
		Body:       []byte(`{"total":42}`),
		Timestamp:  ts,
	}
	require.NoError(t, p.Publish(ctx, sent))

	// A nil Publish means confirmed: the message is already in the queue, so
	// a single basic.get (no waiting) must find it.
	admin := adminChannel(t)
	d, ok, err := admin.Get(b.Queue, true)
	require.NoError(t, err)
	require.True(t, ok, "a confirmed message must be in the queue when Publish returns")

	require.Equal(t, id, d.MessageId)
	require.Equal(t, "order.placed", d.Type)
	require.Equal(t, "order.placed", d.RoutingKey)
	require.Equal(t, b.Exchange, d.Exchange)
	require.Equal(t, "application/json", d.ContentType)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, sent.Body, d.Body)
	require.Equal(t, sent.Headers, d.Headers)
	require.True(t, ts.Equal(d.Timestamp), "timestamp %s, want %s", d.Timestamp, ts)

	_, ok, err = admin.Get(b.Queue, true)
	require.NoError(t, err)
	require.False(t, ok, "exactly one message per Publish")
}

func TestPublishUnroutable(t *testing.T) {
	t.Parallel()
	admin := adminChannel(t)
	exchange := freshExchange(t, admin)
	p := newPublisher(t, broker.Config{URL: ferrytest.AMQPURL(), Exchange: exchange})
	ctx := context.Background()

	// The Publisher declares the exchange; nothing is bound to it.
	err := p.Publish(ctx, msg(ferrytest.Name("evt"), "nobody.listens"))
	require.ErrorIs(t, err, broker.ErrUnroutable)
	require.ErrorContains(t, err, `"nobody.listens"`)
	require.ErrorContains(t, err, exchange)
	require.NotErrorIs(t, err, broker.ErrUnavailable)

	// Binding a queue fixes it, on the same Publisher and connection.
	q := boundQueue(t, admin, exchange, "somebody.listens", nil)
	id := ferrytest.Name("evt")
	require.NoError(t, p.Publish(ctx, msg(id, "somebody.listens")))
	d, ok, err := admin.Get(q, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, id, d.MessageId)

	require.ErrorIs(t, p.Publish(ctx, msg(ferrytest.Name("evt"), "nobody.listens")), broker.ErrUnroutable)
}

// Returns and confirms of concurrent publishes interleave on one channel:
// each Publish must get its own message's outcome.
func TestPublishConcurrentRoutableAndUnroutable(t *testing.T) {
	t.Parallel()
	admin := adminChannel(t)
	exchange := freshExchange(t, admin)
	p := newPublisher(t, broker.Config{URL: ferrytest.AMQPURL(), Exchange: exchange})
	ctx := context.Background()
	require.NoError(t, p.Connect(ctx)) // declares the exchange
	q := boundQueue(t, admin, exchange, "routed.#", nil)

	const n = 50
	prefix := ferrytest.Name("evt")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("routed.%d", i)
			if i%2 == 1 {
				key = fmt.Sprintf("lost.%d", i)
			}
			errs[i] = p.Publish(ctx, msg(fmt.Sprintf("%s-%d", prefix, i), key))
		})
	}
	wg.Wait()

	want := map[string]bool{}
	for i, err := range errs {
		if i%2 == 0 {
			require.NoError(t, err, "publish %d", i)
			want[fmt.Sprintf("%s-%d", prefix, i)] = true
			continue
		}
		require.ErrorIs(t, err, broker.ErrUnroutable, "publish %d", i)
		require.ErrorContains(t, err, fmt.Sprintf(`"lost.%d"`, i))
	}

	got := map[string]bool{}
	for {
		d, ok, err := admin.Get(q, true)
		require.NoError(t, err)
		if !ok {
			break
		}
		require.False(t, got[d.MessageId], "duplicate %s", d.MessageId)
		got[d.MessageId] = true
	}
	require.Equal(t, want, got)
}

// A queue that rejects publishes when full makes the broker nack.
func TestPublishNacked(t *testing.T) {
	t.Parallel()
	admin := adminChannel(t)
	exchange := freshExchange(t, admin)
	p := newPublisher(t, broker.Config{URL: ferrytest.AMQPURL(), Exchange: exchange})
	require.NoError(t, p.Connect(context.Background()))
	boundQueue(t, admin, exchange, "full", amqp.Table{"x-max-length": int64(0), "x-overflow": "reject-publish"})

	err := p.Publish(context.Background(), msg(ferrytest.Name("evt"), "full"))
	require.ErrorIs(t, err, broker.ErrNacked)
	require.NotErrorIs(t, err, broker.ErrUnroutable)
	require.NotErrorIs(t, err, broker.ErrUnavailable)
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   broker.Config
		field string
	}{
		{"empty URL", broker.Config{}, "Config.URL"},
		{"http scheme", broker.Config{URL: "http://guest:secretpw@127.0.0.1:5672/"}, "Config.URL"},
		{"no scheme", broker.Config{URL: "guest:secretpw@127.0.0.1:5672"}, "Config.URL"},
		{"unparseable", broker.Config{URL: "amqp://guest:secretpw@127.0.0.1:5672/%zz"}, "Config.URL"},
		{"exchange with space", broker.Config{URL: "amqp://guest:secretpw@127.0.0.1:5672/", Exchange: "ferry events"}, "Config.Exchange"},
		{"exchange too long", broker.Config{URL: "amqp://guest:secretpw@127.0.0.1:5672/", Exchange: strings.Repeat("x", 256)}, "Config.Exchange"},
		{"negative message size", broker.Config{URL: "amqp://guest:secretpw@127.0.0.1:5672/", MaxMessageBytes: -1}, "Config.MaxMessageBytes"},
		{"message size over RabbitMQ's hard limit", broker.Config{URL: "amqp://guest:secretpw@127.0.0.1:5672/", MaxMessageBytes: 512<<20 + 1}, "Config.MaxMessageBytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := broker.New(tt.cfg)
			require.Error(t, err)
			require.Nil(t, p)
			require.ErrorContains(t, err, tt.field)
			require.NotContains(t, err.Error(), "secretpw")
		})
	}
}

func TestNewDefaultsAndDoesNotDial(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: New must not care.
	p, err := broker.New(broker.Config{URL: "amqps://guest:secretpw@127.0.0.1:1/"})
	require.NoError(t, err)
	require.Equal(t, "ferry.events", p.Exchange())
	require.NoError(t, p.Close())
}

func TestDialErrorHidesPassword(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, broker.Config{URL: "amqp://guest:secretpw@" + amqpHostPort(t) + "/", Exchange: ferrytest.Name("ferry.test")})
	err := p.Connect(context.Background())
	require.ErrorIs(t, err, broker.ErrUnavailable)
	require.NotContains(t, err.Error(), "secretpw")
}

func TestReconnectAfterDroppedConnection(t *testing.T) {
	t.Parallel()
	b := ferrytest.NewBroker(t, "")
	proxy := servers.NewProxy(t, amqpHostPort(t))
	p := newPublisher(t, broker.Config{URL: viaProxy(t, proxy.Addr()), Exchange: b.Exchange, DialTimeout: 5 * time.Second})
	ctx := context.Background()

	var delivered []string
	publishOK := func() {
		t.Helper()
		id := ferrytest.Name("evt")
		require.NoError(t, p.Publish(ctx, msg(id, "k")))
		delivered = append(delivered, id)
	}
	publishOK()

	for range 3 {
		proxy.DropConnections()
		// The first Publish may still use the broken connection; it must
		// then fail as retryable, and the one after it must redial.
		id := ferrytest.Name("evt")
		if err := p.Publish(ctx, msg(id, "k")); err != nil {
			require.ErrorIs(t, err, broker.ErrUnavailable)
		} else {
			delivered = append(delivered, id)
		}
		publishOK()
	}

	got := b.Collect(t, len(delivered), 10*time.Second)
	ids := make([]string, len(got))
	for i, d := range got {
		ids[i] = d.MessageId
	}
	require.Equal(t, delivered, ids)
}

// The connection breaks while a Publish waits for its confirm: the outcome
// is unknown, so the error must be the retryable ErrUnavailable (not a nack,
// which would claim the broker refused the message).
func TestConnectionLostBeforeConfirm(t *testing.T) {
	t.Parallel()
	b := ferrytest.NewBroker(t, "")
	proxy := servers.NewProxy(t, amqpHostPort(t))
	p := newPublisher(t, broker.Config{URL: viaProxy(t, proxy.Addr()), Exchange: b.Exchange, DialTimeout: 5 * time.Second})
	ctx := context.Background()
	require.NoError(t, p.Connect(ctx))

	proxy.Stall()
	done := make(chan error, 1)
	go func() { done <- p.Publish(ctx, msg(ferrytest.Name("evt"), "k")) }()

	// Wait until the publish is on the wire (held by the proxy), then cut.
	deadline := time.Now().Add(5 * time.Second)
	for proxy.Held() == 0 {
		require.True(t, time.Now().Before(deadline), "publish never reached the proxy")
		select {
		case err := <-done:
			require.FailNow(t, "Publish returned before its confirm could arrive", "err: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	proxy.DropConnections()

	select {
	case err := <-done:
		require.ErrorIs(t, err, broker.ErrUnavailable)
		require.NotErrorIs(t, err, broker.ErrNacked)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Publish did not return after its connection was dropped")
	}
	require.NoError(t, p.Publish(ctx, msg(ferrytest.Name("evt"), "k")))
}

func TestBrokerOutage(t *testing.T) {
	t.Parallel()
	b := ferrytest.NewBroker(t, "")
	proxy := servers.NewProxy(t, amqpHostPort(t))
	const dialTimeout = 3 * time.Second
	p := newPublisher(t, broker.Config{URL: viaProxy(t, proxy.Addr()), Exchange: b.Exchange, DialTimeout: dialTimeout})
	ctx := context.Background()

	require.NoError(t, p.Publish(ctx, msg(ferrytest.Name("evt"), "k")))

	proxy.Pause()
	// The first attempt may hit the dead connection, the second surely dials
	// and is refused. Both fail fast and retryably.
	for range 2 {
		start := time.Now()
		err := p.Publish(ctx, msg(ferrytest.Name("evt"), "k"))
		require.ErrorIs(t, err, broker.ErrUnavailable)
		require.Less(t, time.Since(start), dialTimeout)
	}
	require.ErrorIs(t, p.Connect(ctx), broker.ErrUnavailable)

	proxy.Resume()
	id := ferrytest.Name("evt")
	require.NoError(t, p.Publish(ctx, msg(id, "k")))

	got := b.Collect(t, 2, 10*time.Second)
	require.Len(t, got, 2)
	require.Equal(t, id, got[1].MessageId)
}

// The broker accepts the TCP connection but never answers: dialling must give
// up after DialTimeout instead of hanging.
func TestDialTimeoutOnHungBroker(t *testing.T) {
	t.Parallel()
	proxy := servers.NewProxy(t, amqpHostPort(t))
	proxy.Stall()
	const dialTimeout = 500 * time.Millisecond
	p := newPublisher(t, broker.Config{URL: viaProxy(t, proxy.Addr()), Exchange: ferrytest.Name("ferry.test"), DialTimeout: dialTimeout})

	start := time.Now()
	err := p.Publish(context.Background(), msg(ferrytest.Name("evt"), "k"))
	require.ErrorIs(t, err, broker.ErrUnavailable)
	require.Less(t, time.Since(start), dialTimeout+2*time.Second)
}

func TestClose(t *testing.T) {
	t.Parallel()
	b := ferrytest.NewBroker(t, "")
	p, err := broker.New(broker.Config{URL: b.URL, Exchange: b.Exchange})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, p.Publish(ctx, msg(ferrytest.Name("evt"), "k")))

	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	require.ErrorIs(t, p.Publish(ctx, msg(ferrytest.Name("evt"), "k")), broker.ErrClosed)
	require.ErrorIs(t, p.Connect(ctx), broker.ErrClosed)

	// Never connected: Close is a no-op, and idempotent too.
	q, err := broker.New(broker.Config{URL: b.URL, Exchange: b.Exchange})
	require.NoError(t, err)
	require.NoError(t, q.Close())
	require.NoError(t, q.Close())
	require.True(t, errors.Is(q.Publish(ctx, msg(ferrytest.Name("evt"), "k")), broker.ErrClosed))
}

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want string // "" means: anything without the password
	}{
		{"amqp://guest:secretpw@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"amqps://guest:secretpw@rabbit.example:5671/vhost", "amqps://guest:xxxxx@rabbit.example:5671/vhost"},
		{"amqp://127.0.0.1:5672/", "amqp://127.0.0.1:5672/"},
		{"postgres://ferry:secretpw@db:5432/app?sslmode=disable", "postgres://ferry:xxxxx@db:5432/app?sslmode=disable"},
		{"postgres://ferry@db:5432/app?password=secretpw&sslmode=disable", ""},
		{"guest:secretpw@127.0.0.1:5672", ""},
		{"host=db user=ferry password=secretpw dbname=app", ""},
		{"amqp://guest:secretpw@127.0.0.1:5672/%zz", ""},
		{"postgres://ferry@db/app?password=secret%zzpw", ""},
		{"postgres://ferry@db/app?password=secretpw;x=1", ""},
		{"postgres://ferry@db/app?PASSWORD=secretpw", ""},
	}
	for _, tt := range tests {
		got := broker.Redact(tt.raw)
		require.NotContains(t, got, "secretpw", "Redact(%q)", tt.raw)
		if tt.want != "" {
			require.Equal(t, tt.want, got, "Redact(%q)", tt.raw)
		}
	}
}

// A batch is one confirm window: every message is sent before the first
// confirm is awaited, and they arrive in the order given.
func TestPublishBatchInOrder(t *testing.T) {
	t.Parallel()
	b := ferrytest.NewBroker(t, "")
	p := newPublisher(t, broker.Config{URL: b.URL, Exchange: b.Exchange})

	var msgs []broker.Message
	for i := range 150 {
		msgs = append(msgs, msg(fmt.Sprintf("%s-%03d", ferrytest.Name("evt"), i), "order.placed"))
	}
	n, err := p.PublishBatch(context.Background(), msgs)
	require.NoError(t, err)
	require.Equal(t, len(msgs), n)

	admin := adminChannel(t)
	for i, want := range msgs {
		d, ok, err := admin.Get(b.Queue, true)
		require.NoError(t, err)
		require.True(t, ok, "message %d of a confirmed batch is not in the queue", i)
		require.Equal(t, want.ID, d.MessageId, "message %d out of order", i)
	}
	_, ok, err := admin.Get(b.Queue, true)
	require.NoError(t, err)
	require.False(t, ok, "exactly one message per batch entry")

	n, err = p.PublishBatch(context.Background(), nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

// A failure in the middle of a batch: the count says how many leading
// messages were confirmed, the error names the failing one, and nothing
// after it reaches a queue, so no later message overtakes it.
func TestPublishBatchStopsAtFirstFailure(t *testing.T) {
	t.Parallel()
	admin := adminChannel(t)
	exchange := freshExchange(t, admin)
	p := newPublisher(t, broker.Config{URL: ferrytest.AMQPURL(), Exchange: exchange})
	ctx := context.Background()
	require.NoError(t, p.Connect(ctx)) // declares the exchange
	q := boundQueue(t, admin, exchange, "somebody.listens", nil)

	// Warm up the route, so the batch below pipelines this key.
	require.NoError(t, p.Publish(ctx, msg(ferrytest.Name("warm"), "somebody.listens")))
	_, ok, err := admin.Get(q, true)
	require.NoError(t, err)
	require.True(t, ok)

	first, second, bad, later := ferrytest.Name("a"), ferrytest.Name("b"), ferrytest.Name("c"), ferrytest.Name("d")
	n, err := p.PublishBatch(ctx, []broker.Message{
		msg(first, "somebody.listens"),
		msg(second, "somebody.listens"),
		msg(bad, "nobody.listens"),
		msg(later, "somebody.listens"),
	})
	require.Equal(t, 2, n)
	require.ErrorIs(t, err, broker.ErrUnroutable)
	require.ErrorContains(t, err, `"nobody.listens"`)

	for _, want := range []string{first, second} {
		d, ok, err := admin.Get(q, true)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want, d.MessageId)
	}
	_, ok, err = admin.Get(q, true)
	require.NoError(t, err)
	require.False(t, ok, "a message after the unroutable one reached the queue before it")

	// Once a queue is bound, the retry goes out in order.
	q2 := boundQueue(t, admin, exchange, "nobody.listens", nil)
	n, err = p.PublishBatch(ctx, []broker.Message{msg(bad, "nobody.listens"), msg(later, "somebody.listens")})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for queue, want := range map[string]string{q: later, q2: bad} {
		d, ok, err := admin.Get(queue, true)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want, d.MessageId)
	}
}
