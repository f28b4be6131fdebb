package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/consumer"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/internal/testenv"
	"github.com/ferry-outbox/ferry/upcast"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is one test's PostgreSQL schema (outbox and inbox tables, and a
// business table), exchange, and a consumer queue reached through a proxy
// that can cut the consumer's connections.
type env struct {
	t      *testing.T
	db     *ferrytest.DB
	broker *ferrytest.Broker
	proxy  *servers.Proxy
	queue  string
	inbox  *inbox.Inbox
	ch     *amqp.Channel // the test's own channel, in confirm mode
	logs   *ferrytest.Buffer
}

func setup(t *testing.T) *env {
	t.Helper()
	db := ferrytest.NewDB(t, "")
	_, err := inbox.Migrate(t.Context(), db.Pool, nil)
	require.NoError(t, err)
	_, err = db.Pool.Exec(t.Context(), `CREATE TABLE effects (event_id text NOT NULL, aggregate_id text NOT NULL,
		version bigint NOT NULL, payload text NOT NULL, seq serial)`)
	require.NoError(t, err)
	in, err := inbox.New(inbox.Config{Pool: db.Pool, Consumer: "inventory"})
	require.NoError(t, err)

	b := ferrytest.NewBroker(t, "")
	u, err := url.Parse(b.URL)
	require.NoError(t, err)
	proxy := servers.NewProxy(t, u.Host)

	conn, err := amqp.Dial(b.URL)
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	e := &env{t: t, db: db, broker: b, proxy: proxy, queue: ferrytest.Name("ferry.consumer"), inbox: in, ch: ch, logs: &ferrytest.Buffer{}}
	t.Cleanup(func() {
		ferrytest.DeleteConsumerTopology(ch, e.queue)
		_ = conn.Close()
	})
	return e
}

// config is a consumer of the test queue through the proxy, with timings
// fit for tests.
func (e *env) config(h inbox.Handler) consumer.Config {
	u, err := url.Parse(e.broker.URL)
	require.NoError(e.t, err)
	u.Host = e.proxy.Addr()
	return consumer.Config{
		URL:                 u.String(),
		Queue:               e.queue,
		Exchange:            e.broker.Exchange,
		Bindings:            []string{"order.*"},
		Inbox:               e.inbox,
		Handler:             h,
		RetryBackoff:        5 * time.Millisecond,
		MaxRetryBackoff:     50 * time.Millisecond,
		GapRetryDelay:       50 * time.Millisecond,
		ReconnectBackoff:    20 * time.Millisecond,
		MaxReconnectBackoff: 200 * time.Millisecond,
		ShutdownTimeout:     10 * time.Second,
		Logger:              slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// start builds, declares and starts a consumer, stopped at cleanup.
func (e *env) start(cfg consumer.Config) *consumer.Consumer {
	e.t.Helper()
	c, err := consumer.New(cfg)
	require.NoError(e.t, err)
	require.NoError(e.t, c.Declare(e.t.Context()))
	require.NoError(e.t, c.Start(e.t.Context()))
	e.t.Cleanup(c.Stop)
	require.Eventually(e.t, func() bool { return c.Stats().Consuming }, 10*time.Second, 5*time.Millisecond, "consumer never started consuming")
	return c
}

// record is a handler whose effect is one row in effects.
func record(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, aggregate_id, version, payload) VALUES ($1, $2, $3, $4)`,
		ev.ID, ev.AggregateID, ev.AggregateVersion, string(ev.Payload))
	return err
}

type msg struct {
	id, aggregateID, eventType string
	version, schema            int64
	body                       string
	noHeaders                  bool
	// extra headers, beside Ferry's (a producer's event headers).
	extra amqp.Table
	// timestamp is the message's (the commit, as the relay stamps it);
	// zero: none.
	timestamp time.Time
}

func order(id, aggregateID string, version int64) msg {
	return msg{id: id, aggregateID: aggregateID, eventType: "created", version: version, schema: 1, body: `{"id":"` + id + `"}`}
}

// publish sends m as Ferry's relay does and waits for the confirm.
func (e *env) publish(m msg) {
	e.t.Helper()
	h := amqp.Table{
		broker.HeaderAggregateType:    "order",
		broker.HeaderAggregateID:      m.aggregateID,
		broker.HeaderAggregateVersion: m.version,
		broker.HeaderSchemaVersion:    m.schema,
	}
	for k, v := range m.extra {
		h[k] = v
	}
	if m.noHeaders {
		h = nil
	}
	dc, err := e.ch.PublishWithDeferredConfirm(e.broker.Exchange, "order."+m.eventType, true, false, amqp.Publishing{
		Headers: h, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		MessageId: m.id, Type: m.eventType, Body: []byte(m.body), Timestamp: m.timestamp,
	})
	require.NoError(e.t, err)
	require.True(e.t, dc.Wait(), "publish %s not confirmed", m.id)
}

// effects lists applied events as "id@vN" in commit order.
func (e *env) effects() []string {
	e.t.Helper()
	rows, err := e.db.Pool.Query(context.Background(), `SELECT event_id || '@v' || version FROM effects ORDER BY seq`)
	require.NoError(e.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(e.t, err)
	return out
}

// waitEffects waits until the effects are want, in this order.
func (e *env) waitEffects(want ...string) {
	e.t.Helper()
	require.EventuallyWithT(e.t, func(c *assert.CollectT) {
		assert.Equal(c, want, e.effects())
	}, 15*time.Second, 10*time.Millisecond)
}

// waitEffectsOfAggregates waits for want in any order: different
// aggregates run on different workers.
func (e *env) waitEffectsOfAggregates(want ...string) {
	e.t.Helper()
	require.EventuallyWithT(e.t, func(c *assert.CollectT) {
		assert.ElementsMatch(c, want, e.effects())
	}, 15*time.Second, 10*time.Millisecond)
}

// messages is how many messages wait in queue (none of them unacked).
func (e *env) messages(queue string) int {
	e.t.Helper()
	q, err := e.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(e.t, err)
	return q.Messages
}

// dead takes the next message off the dead-letter queue, waiting for it.
func (e *env) dead() amqp.Delivery {
	e.t.Helper()
	var got amqp.Delivery
	require.Eventually(e.t, func() bool {
		d, ok, err := e.ch.Get(e.queue+".dlq", true)
		require.NoError(e.t, err)
		got = d
		return ok
	}, 15*time.Second, 10*time.Millisecond, "nothing reached %s.dlq", e.queue)
	return got
}

// results collects OnResult calls.
type results struct {
	mu  sync.Mutex
	all []consumer.Result
}

func (r *results) add(res consumer.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, res)
}

func (r *results) outcomes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, res := range r.all {
		out = append(out, fmt.Sprintf("%s@v%d:%s", res.Event.ID, res.Event.AggregateVersion, res.Outcome))
	}
	return out
}

// Issue #4, test 1: the same event delivered at the same time to two
// instances of one consumer takes effect once. Each instance has a prefetch
// of one, so the broker hands one copy to each; the instance whose handler
// runs first holds its transaction open until the other is blocked on the
// event's inbox row, so the two deliveries really overlap.
func TestSameEventToTwoInstancesTakesEffectOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	holdUntilPeerBlocked := func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if err := testenv.WaitForWaiter(ctx, tx, 10*time.Second); err != nil {
			return err
		}
		return record(ctx, tx, ev)
	}
	cfg := e.config(holdUntilPeerBlocked)
	cfg.Prefetch, cfg.Concurrency = 1, 1
	a := e.start(cfg)
	b := e.start(cfg)

	m := order("ev-1", "42", 1)
	e.publish(m)
	e.publish(m) // Ferry re-published it: at-least-once

	e.waitEffects("ev-1@v1")
	// Both outcomes are counted after their commits, in either order.
	require.Eventually(t, func() bool {
		return a.Stats().Duplicates+b.Stats().Duplicates == 1 && a.Stats().Applied+b.Stats().Applied == 1
	}, 15*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(1), a.Stats().Applied*b.Stats().Duplicates+b.Stats().Applied*a.Stats().Duplicates,
		"one instance applied, the other deduplicated")
	a.Stop()
	b.Stop()
	require.Zero(t, e.messages(e.queue), "both copies acknowledged")
	require.Equal(t, []string{"ev-1@v1"}, e.effects())
}

// Issue #4, test 2a: the consumer dies after its transaction committed and
// before the ack reached the broker (here: its connection is cut at that
// very point). The broker redelivers; the redelivery has no effect.
func TestCrashAfterCommitBeforeAckHasNoEffectOnRedelivery(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var res results
	var crashed atomic.Bool
	cfg := e.config(record)
	cfg.OnResult = func(r consumer.Result) {
		res.add(r)
		if r.Outcome == consumer.Applied && crashed.CompareAndSwap(false, true) {
			e.proxy.DropConnections()
		}
	}
	c := e.start(cfg)
	e.publish(order("ev-1", "42", 1))

	require.Eventually(t, func() bool { return c.Stats().Duplicates == 1 }, 15*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"ev-1@v1:applied", "ev-1@v1:duplicate"}, res.outcomes())
	require.Equal(t, 2, res.all[1].Deliveries, "the duplicate is the broker's redelivery")
	require.True(t, res.all[1].Delivery.Redelivered)
	require.GreaterOrEqual(t, c.Stats().Connects, int64(2), "the consumer reconnected")
	c.Stop()
	require.Equal(t, []string{"ev-1@v1"}, e.effects())
	require.Zero(t, e.messages(e.queue))
}

// Issue #4, test 2b: the consumer dies inside the transaction, before the
// commit: nothing of it remains, and the redelivery applies the event once.
func TestCrashBeforeCommitAppliesOnceAfterRedelivery(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var calls atomic.Int32
	var res results
	cfg := e.config(func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if err := record(ctx, tx, ev); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			e.proxy.DropConnections()
			return errors.New("process died before commit")
		}
		return nil
	})
	cfg.OnResult = res.add
	c := e.start(cfg)
	e.publish(order("ev-1", "42", 1))

	require.Eventually(t, func() bool { return c.Stats().Applied == 1 }, 15*time.Second, 10*time.Millisecond)
	c.Stop()
	require.Equal(t, int32(2), calls.Load())
	require.Equal(t, []string{"ev-1@v1"}, e.effects())
	require.Equal(t, []string{"ev-1@v1:retried", "ev-1@v1:applied"}, res.outcomes())
	require.Zero(t, c.Stats().Duplicates)
	require.Zero(t, e.messages(e.queue))
}

// Issue #4, test 3: versions of one aggregate published out of order. The
// policy: a gap waits (through the retry queue) for the missing version, so
// effects commit in version order; a stale version is acknowledged without
// effect; a gap that is never filled is parked after GapTimeout, with the
// reason in its headers.
func TestOutOfOrderVersionsFollowThePolicy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var res results
	cfg := e.config(record)
	cfg.OnResult = res.add
	cfg.Concurrency = 1
	cfg.GapTimeout = 2 * time.Second
	c := e.start(cfg)

	e.publish(order("a", "42", 1))
	e.publish(order("c", "42", 3))
	e.publish(order("b", "42", 2))
	e.waitEffects("a@v1", "b@v2", "c@v3")
	require.Contains(t, res.outcomes(), "c@v3:delayed")

	e.publish(order("b-again-with-a-new-id", "42", 2))
	e.publish(order("x", "43", 2)) // aggregate 43 never gets its version 1
	parked := e.dead()
	require.Equal(t, "x", parked.MessageId)
	require.Equal(t, consumer.CauseGapTimeout, parked.Headers[consumer.HeaderParkedCause])
	require.Contains(t, parked.Headers[consumer.HeaderParkedReason], "version 2 of order/43 waited")
	require.Contains(t, parked.Headers[consumer.HeaderParkedReason], "for version 1 (last applied 0)")
	require.Contains(t, parked.Headers[consumer.HeaderParkedReason], "if version 1 is blocked at Ferry (ferry blocked), repair it there, then move this message back to "+e.queue)
	require.Contains(t, parked.Headers[consumer.HeaderParkedReason], "a version skipped at Ferry (ferry_repairs) never comes")
	require.NotContains(t, parked.Headers[consumer.HeaderParkedReason], "replay the missing version", "a replay takes only published events")
	require.Equal(t, "inventory", parked.Headers[consumer.HeaderParkedBy])
	require.Equal(t, "order.created", parked.Headers[consumer.HeaderOriginalRoutingKey])
	require.Equal(t, []byte(`{"id":"x"}`), parked.Body, "parked as it arrived")

	require.Eventually(t, func() bool { return c.Stats().Stale == 1 }, 15*time.Second, 10*time.Millisecond)
	c.Stop() // counters are final once the workers are done
	s := c.Stats()
	require.Equal(t, int64(3), s.Applied)
	require.Equal(t, int64(1), s.Parked)
	require.GreaterOrEqual(t, s.Delayed, int64(2), "c waited once at least, x until its timeout")
	require.Equal(t, []string{"a@v1", "b@v2", "c@v3"}, e.effects(), "nothing else took effect")
	require.Contains(t, e.logs.String(), "level=ERROR msg=\"event parked\"")
}

// Issue #4, test 4: an event with a schema version this consumer cannot
// read is not applied: it is quarantined in the dead-letter queue with the
// reason in its headers, counted, logged at error level and reported to
// OnResult, and later independent events are still applied (older ones
// upcast first).
func TestInvalidSchemaVersionIsQuarantined(t *testing.T) {
	t.Parallel()
	e := setup(t)
	schemas := upcast.NewRegistry()
	require.NoError(t, schemas.Register("created", 2, upcast.Step{From: 1, Fn: func(p []byte) ([]byte, error) {
		return []byte(`{"upcast":` + string(p) + `}`), nil
	}}))
	var res results
	cfg := e.config(record)
	cfg.Schemas = schemas
	cfg.OnResult = res.add
	c := e.start(cfg)

	future := order("from-the-future", "1", 1)
	future.schema = 9
	e.publish(future)
	e.publish(msg{id: "not-from-ferry", eventType: "created", body: `{}`, noHeaders: true})
	e.publish(order("old", "2", 1))
	current := order("current", "3", 1)
	current.schema = 2
	e.publish(current)

	// The consumer's workers take the two at once: either can reach the
	// dead-letter queue first.
	dead := map[string]amqp.Delivery{}
	for range 2 {
		d := e.dead()
		dead[d.MessageId] = d
	}
	require.Contains(t, dead, "from-the-future")
	require.Contains(t, dead, "not-from-ferry")
	require.Equal(t, consumer.CauseSchema, dead["from-the-future"].Headers[consumer.HeaderParkedCause])
	require.Equal(t, `unknown schema version: "created" schema version 9 is newer than this consumer reads (v2)`,
		dead["from-the-future"].Headers[consumer.HeaderParkedReason])
	require.Equal(t, consumer.CauseInvalidEvent, dead["not-from-ferry"].Headers[consumer.HeaderParkedCause])

	e.waitEffectsOfAggregates("old@v1", "current@v1")
	var payload string
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT payload FROM effects WHERE event_id = 'old'`).Scan(&payload))
	require.Equal(t, `{"upcast":{"id":"old"}}`, payload)

	c.Stop() // counters are final once the workers are done
	require.Equal(t, int64(2), c.Stats().Quarantined)
	require.Contains(t, res.outcomes(), "from-the-future@v1:quarantined")
	require.Contains(t, e.logs.String(), `level=ERROR msg="event quarantined"`)
	require.Contains(t, e.logs.String(), "dead_letter_queue="+e.queue+".dlq")
	var n int
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM inbox_processed_events WHERE event_id = 'from-the-future'`).Scan(&n))
	require.Zero(t, n, "a quarantined event is not recorded as processed: replayed after a fix, it applies")
}

// Issue #4, test 5: a handler that always fails. After the delivery limit
// the message is in the dead-letter queue with the handler's error, not
// lost; other events keep flowing meanwhile.
func TestAlwaysFailingHandlerEndsInTheDeadLetterQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var calls atomic.Int32
	cfg := e.config(func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if ev.ID == "poison" {
			calls.Add(1)
			return errors.New("no stock table for warehouse 7")
		}
		return record(ctx, tx, ev)
	})
	cfg.DeliveryLimit = 3
	c := e.start(cfg)
	e.publish(order("poison", "1", 1))
	e.publish(order("fine", "2", 1))

	d := e.dead()
	require.Equal(t, "poison", d.MessageId)
	require.Equal(t, consumer.CauseHandlerFailed, d.Headers[consumer.HeaderParkedCause])
	require.Equal(t, "handler failed on all 4 deliveries; last error: handler: no stock table for warehouse 7",
		d.Headers[consumer.HeaderParkedReason])
	require.Equal(t, int32(4), calls.Load(), "DeliveryLimit 3: the first delivery and three more")
	e.waitEffectsOfAggregates("fine@v1")
	c.Stop() // counters are final once the workers are done
	s := c.Stats()
	require.Equal(t, int64(3), s.Retried)
	require.Equal(t, int64(1), s.Parked)
	require.Zero(t, e.messages(e.queue))
}

// Test 5, the broker's half: a message that kills the consumer every time
// (no chance to park it) is dead-lettered by the queue's delivery limit.
func TestCrashLoopIsDeadLetteredByTheBroker(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var calls atomic.Int32
	cfg := e.config(func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		calls.Add(1)
		e.proxy.DropConnections()
		return errors.New("crashed")
	})
	cfg.DeliveryLimit = 2
	e.start(cfg)
	e.publish(order("killer", "1", 1))

	d := e.dead()
	require.Equal(t, "killer", d.MessageId)
	require.Equal(t, "delivery_limit", d.Headers["x-first-death-reason"])
	require.Equal(t, int32(3), calls.Load())
}

// Stop lets a delivery in hand finish and acknowledges it before closing.
func TestStopFinishesInFlightDeliveries(t *testing.T) {
	t.Parallel()
	e := setup(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	cfg := e.config(func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		close(entered)
		<-release
		return record(ctx, tx, ev)
	})
	c := e.start(cfg)
	e.publish(order("slow", "1", 1))
	<-entered

	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	require.Eventually(t, func() bool { return !c.Stats().Consuming }, 10*time.Second, 5*time.Millisecond,
		"Stop cancels the subscription first")
	select {
	case <-stopped:
		t.Fatal("Stop returned while a delivery was in hand")
	default:
	}
	close(release)
	<-stopped
	c.Stop() // a second Stop is fine
	require.Equal(t, []string{"slow@v1"}, e.effects())
	require.Zero(t, e.messages(e.queue), "acknowledged before the connection closed")
}

// The broker away at start and later: the consumer keeps redialling with
// backoff and consumes once it is back.
func TestReconnectsWhenTheBrokerComesBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cfg := e.config(record)
	c, err := consumer.New(cfg)
	require.NoError(t, err)
	require.NoError(t, c.Declare(t.Context()))
	e.proxy.Pause()
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(c.Stop)
	e.publish(order("a", "1", 1))
	require.Eventually(t, func() bool { return bytes.Contains([]byte(e.logs.String()), []byte("cannot consume; retrying")) },
		10*time.Second, 5*time.Millisecond)
	require.Zero(t, c.Stats().Connects)

	e.proxy.Resume()
	e.waitEffects("a@v1")
	e.proxy.DropConnections()
	e.publish(order("b", "2", 1))
	e.waitEffectsOfAggregates("a@v1", "b@v1")
	require.GreaterOrEqual(t, c.Stats().Connects, int64(2))
}

// A queue that exists with other arguments is reported, not silently used.
func TestDeclareReportsAConflictingQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, err := e.ch.QueueDeclare(e.queue, true, false, false, false, nil) // classic, no dead-letter exchange
	require.NoError(t, err)
	c, err := consumer.New(e.config(record))
	require.NoError(t, err)
	err = c.Declare(t.Context())
	require.ErrorContains(t, err, "exists with other arguments")
	require.ErrorContains(t, err, "Config.Queue")
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	in, err := inbox.New(inbox.Config{Pool: ferrytest.NewDB(t, "").Pool, Consumer: "c"})
	require.NoError(t, err)
	valid := func() consumer.Config {
		return consumer.Config{URL: "amqp://127.0.0.1/", Queue: "q", Bindings: []string{"order.*"}, Inbox: in, Handler: record}
	}
	tests := []struct {
		name      string
		mutate    func(*consumer.Config)
		wantField string
	}{
		{name: "defaults", mutate: func(*consumer.Config) {}},
		{name: "no URL", mutate: func(c *consumer.Config) { c.URL = "" }, wantField: "Config.URL"},
		{name: "http URL", mutate: func(c *consumer.Config) { c.URL = "http://x/" }, wantField: "Config.URL"},
		{name: "no queue", mutate: func(c *consumer.Config) { c.Queue = "" }, wantField: "Config.Queue"},
		{name: "queue with slash", mutate: func(c *consumer.Config) { c.Queue = "a/b" }, wantField: "Config.Queue"},
		{name: "no bindings", mutate: func(c *consumer.Config) { c.Bindings = nil }, wantField: "Config.Bindings"},
		{name: "no inbox", mutate: func(c *consumer.Config) { c.Inbox = nil }, wantField: "Config.Inbox"},
		{name: "no handler", mutate: func(c *consumer.Config) { c.Handler = nil }, wantField: "Config.Handler"},
		{name: "concurrency over prefetch", mutate: func(c *consumer.Config) { c.Prefetch, c.Concurrency = 2, 3 }, wantField: "Config.Concurrency"},
		{name: "negative delivery limit", mutate: func(c *consumer.Config) { c.DeliveryLimit = -1 }, wantField: "Config.DeliveryLimit"},
		{name: "gap timeout under the delay", mutate: func(c *consumer.Config) { c.GapRetryDelay, c.GapTimeout = time.Second, time.Millisecond }, wantField: "Config.GapTimeout"},
		{name: "retry backoff over its cap", mutate: func(c *consumer.Config) { c.RetryBackoff, c.MaxRetryBackoff = time.Minute, time.Second }, wantField: "Config.RetryBackoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid()
			tt.mutate(&cfg)
			_, err := consumer.New(cfg)
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantField)
		})
	}
}
