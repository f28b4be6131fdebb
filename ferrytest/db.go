package ferrytest

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

	"github.com/ferry-outbox/ferry/schema"
)

// Defaults of the test services (PostgresURL, AMQPURL).
const (
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test"
	DefaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
)

// PostgresURL is the database NewDB creates schemas in when given no URL:
// FERRY_TEST_POSTGRES_URL, else DefaultPostgresURL.
func PostgresURL() string {
	if v := os.Getenv("FERRY_TEST_POSTGRES_URL"); v != "" {
		return v
	}
	return DefaultPostgresURL
}

// Name returns prefix plus a random suffix, safe as an SQL identifier, a
// queue, an exchange or a task queue name.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// DB is one test's PostgreSQL schema with Ferry's tables.
type DB struct {
	// Pool's connections use the schema (search_path).
	Pool *pgxpool.Pool
	// Schema is the schema's name.
	Schema string
	// URL connects to the same schema (search_path set), for a child
	// process or a second pool.
	URL string
}

// NewDB creates a fresh schema in the database at databaseURL ("":
// PostgresURL), applies Ferry's migrations to it (schema.Migrate) and
// returns a pool whose connections use it. The pool is closed and the
// schema dropped at the test's cleanup. Migrate your own tables into it
// the same way, through db.Pool.
func NewDB(tb testing.TB, databaseURL string) *DB {
	tb.Helper()
	if databaseURL == "" {
		databaseURL = PostgresURL()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		tb.Fatalf("ferrytest: PostgreSQL is required at %s and did not answer: %v\n"+
			"  start it, or pass NewDB the URL of a database for tests (an empty URL reads FERRY_TEST_POSTGRES_URL)", redact(databaseURL), err)
	}
	defer admin.Close(ctx)
	name := Name("ferry_test")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("ferrytest: create schema %s: %v", name, err)
	}
	u := WithSearchPath(databaseURL, name)
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		tb.Fatalf("ferrytest: open a pool on schema %s: %v", name, err)
	}
	tb.Cleanup(func() {
		pool.Close()
		dropAtCleanup(tb, databaseURL, "drop schema "+name, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	if _, err := schema.Migrate(ctx, pool, nil); err != nil {
		tb.Fatalf("ferrytest: migrate schema %s: %v", name, err)
	}
	return &DB{Pool: pool, Schema: name, URL: u}
}

// dropAtCleanup runs stmt on a connection of its own to base (the test's
// context is gone by cleanup), reporting a failure as "what: error".
func dropAtCleanup(tb testing.TB, base, what, stmt string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Errorf("ferrytest: %s: %v", what, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		tb.Errorf("ferrytest: %s: %v", what, err)
	}
}

// WithSearchPath returns rawURL with its connections' search_path set to
// schemaName.
func WithSearchPath(rawURL, schemaName string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("ferrytest: bad PostgreSQL URL: %v", err))
	}
	q := u.Query()
	q.Set("search_path", schemaName)
	u.RawQuery = q.Encode()
	return u.String()
}

// redact hides a URL's password.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<bad URL>"
	}
	return strings.TrimSpace(u.Redacted())
}
