package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferry-outbox/ferry/schema"
)

// Defaults of the test services.
const (
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test"
	DefaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
)

// PostgresBaseURL is the database the tests create their schemas in.
func PostgresBaseURL() string {
	if v := os.Getenv("FERRY_TEST_POSTGRES_URL"); v != "" {
		return v
	}
	return DefaultPostgresURL
}

// AMQPURL is the broker the tests use.
func AMQPURL() string {
	if v := os.Getenv("FERRY_TEST_AMQP_URL"); v != "" {
		return v
	}
	return DefaultAMQPURL
}

// Name returns prefix plus a random suffix, safe as an SQL identifier,
// a queue or an exchange name.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// DB is one test's PostgreSQL schema.
type DB struct {
	Pool   *pgxpool.Pool
	Schema string
	// URL connects to the same schema (search_path set), for child processes.
	URL string
}

// Postgres creates a fresh schema, applies Ferry's migrations to it and
// returns a pool whose connections use it. The schema is dropped at cleanup.
func Postgres(t testing.TB) *DB {
	t.Helper()
	return postgresIn(t, PostgresBaseURL())
}

// PostgresOwnDatabase is Postgres in a database of the test's own, dropped
// at cleanup. Tests of database-wide behaviour use it: NOTIFY channels and
// advisory locks are shared by every schema of a database, so tests running
// in parallel in other schemas would otherwise see or take them.
func PostgresOwnDatabase(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := PostgresBaseURL()
	admin := connectAdmin(ctx, t, base)
	defer admin.Close(ctx)
	name := Name("ferry_test")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		dropAtCleanup(t, base, "drop database "+name, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("bad PostgreSQL URL %s: %v", redact(base), err)
	}
	u.Path = "/" + name
	return postgresIn(t, u.String())
}

func connectAdmin(ctx context.Context, t testing.TB, base string) *pgx.Conn {
	t.Helper()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL is required at %s and did not answer: %v\n"+
			"start it (pg_ctlcluster --skip-systemctl-redirect <version> main start) or set FERRY_TEST_POSTGRES_URL", redact(base), err)
	}
	return admin
}

// postgresIn creates the test's schema in the database at base.
func postgresIn(t testing.TB, base string) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := connectAdmin(ctx, t, base)
	defer admin.Close(ctx)
	name := Name("ferry_test")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	u := WithSearchPath(base, name)
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatalf("open pool on schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		pool.Close()
		dropAtCleanup(t, base, "drop schema "+name, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	if _, err := schema.Migrate(ctx, pool, nil); err != nil {
		t.Fatalf("migrate schema %s: %v", name, err)
	}
	return &DB{Pool: pool, Schema: name, URL: u}
}

// dropAtCleanup runs stmt on a connection of its own to base (the test's
// context is gone by cleanup), reporting a failure as "what: error".
func dropAtCleanup(t testing.TB, base, what, stmt string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// WithSearchPath returns rawURL with its connections' search_path set to
// schemaName.
func WithSearchPath(rawURL, schemaName string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("testenv: bad PostgreSQL URL: %v", err))
	}
	q := u.Query()
	q.Set("search_path", schemaName)
	u.RawQuery = q.Encode()
	return u.String()
}

// Broker is one test's RabbitMQ exchange with a queue bound to every routing
// key of it.
type Broker struct {
	URL      string
	Exchange string
	Queue    string
	conn     *amqp.Connection
	ch       *amqp.Channel
}

// RabbitMQ declares a unique topic exchange and a queue bound to it with
// "#" on the test broker. Both are deleted at cleanup.
func RabbitMQ(t testing.TB) *Broker {
	t.Helper()
	return RabbitMQAt(t, AMQPURL())
}

// RabbitMQAt is RabbitMQ on the broker at u (a RabbitNode's URL). The
// exchange and the queue are durable, so they outlive a restart of the
// node; Get and Collect need the connection they were declared on, and a
// restart closes it.
func RabbitMQAt(t testing.TB, u string) *Broker {
	t.Helper()
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatalf("RabbitMQ is required at %s and did not answer: %v\n"+
			"start it (rabbitmq-server -detached) or set FERRY_TEST_AMQP_URL", redact(u), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	b := &Broker{URL: u, Exchange: Name("ferry.test"), Queue: Name("ferry.test.q"), conn: conn, ch: ch}
	if err := ch.ExchangeDeclare(b.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange: %v", err)
	}
	if _, err := ch.QueueDeclare(b.Queue, true, false, false, false, nil); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	if err := ch.QueueBind(b.Queue, "#", b.Exchange, false, nil); err != nil {
		t.Fatalf("bind queue: %v", err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(b.Queue, false, false, false)
		_ = ch.ExchangeDelete(b.Exchange, false, false)
		_ = conn.Close()
	})
	return b
}

// Get takes one message off the test queue, waiting until deadline.
func (b *Broker) Get(t testing.TB, timeout time.Duration) (amqp.Delivery, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d, ok, err := b.ch.Get(b.Queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", b.Queue, err)
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

// Collect takes messages off the test queue until n have arrived or timeout
// passes, then returns what arrived.
func (b *Broker) Collect(t testing.TB, n int, timeout time.Duration) []amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out []amqp.Delivery
	for len(out) < n {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		d, ok := b.Get(t, left)
		if !ok {
			break
		}
		out = append(out, d)
	}
	return out
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<bad URL>"
	}
	return strings.TrimSpace(u.Redacted())
}

// Channel is the channel the exchange and the queue were declared on, for
// a test's own topology.
func (b *Broker) Channel(t testing.TB) *amqp.Channel { return b.ch }

// Bind binds the test queue to routingKey on the test exchange.
func (b *Broker) Bind(t testing.TB, routingKey string) {
	t.Helper()
	if err := b.ch.QueueBind(b.Queue, routingKey, b.Exchange, false, nil); err != nil {
		t.Fatalf("bind %s to %q: %v", b.Queue, routingKey, err)
	}
}

// Unbind removes the binding of the test queue to routingKey.
func (b *Broker) Unbind(t testing.TB, routingKey string) {
	t.Helper()
	if err := b.ch.QueueUnbind(b.Queue, routingKey, b.Exchange, nil); err != nil {
		t.Fatalf("unbind %s from %q: %v", b.Queue, routingKey, err)
	}
}

// DeleteConsumerTopology deletes what a consumer of queue declares (package
// consumer): the queue, its .retry and .dlq queues and its .dlx exchange.
// Errors are ignored: cleanup of what may not exist.
func DeleteConsumerTopology(ch *amqp.Channel, queue string) {
	for _, q := range []string{queue, queue + ".retry", queue + ".dlq"} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(queue+".dlx", false, false)
}
