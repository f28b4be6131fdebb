package ferrytest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// NewOwnDB is NewDB in a database of the test's own on the server of
// serverURL ("": PostgresURL), dropped at the test's cleanup. Tests of
// database-wide behaviour use it: NOTIFY channels and advisory locks are
// shared by every schema of a database, so tests running in parallel in
// other schemas would otherwise see or take them.
func NewOwnDB(t testing.TB, serverURL string) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := serverURL
	if base == "" {
		base = PostgresURL()
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("ferrytest: PostgreSQL is required at %s and did not answer: %v\n"+
			"  start it, or pass NewOwnDB the URL of a server for tests (an empty URL reads FERRY_TEST_POSTGRES_URL)", redact(base), err)
	}
	defer admin.Close(ctx)
	name := Name("ferry_test")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("ferrytest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("ferrytest: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("ferrytest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("ferrytest: bad PostgreSQL URL %s: %v", redact(base), err)
	}
	u.Path = "/" + name
	return NewDB(t, u.String())
}
