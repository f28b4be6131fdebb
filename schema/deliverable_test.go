package schema_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/internal/migrate"
	"github.com/ferry-outbox/ferry/schema"
)

// printableASCII is every byte Temporal takes in a workflow ID.
func printableASCII() string {
	var b strings.Builder
	for c := byte(0x20); c <= 0x7e; c++ {
		b.WriteByte(c)
	}
	return b.String()
}

// requireCheckViolation says err is PostgreSQL refusing a row by the named
// CHECK constraint, whose name names the column.
func requireCheckViolation(t *testing.T, err error, constraint string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a check violation of %s, got %v", constraint, err)
	require.Equal(t, "23514", pgErr.Code, "%v", err)
	require.Equal(t, constraint, pgErr.ConstraintName, "%v", err)
	require.Contains(t, pgErr.Message, constraint)
}

// A producer writing plain SQL gets an error naming the column for every
// value the relay could never hand to Temporal, before anything commits.
func TestInsertRefusesUndeliverableNames(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	insert := func(aggType, aggID, eventType string) error {
		_, err := db.Pool.Exec(ctx,
			`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, '{}')`,
			aggType, aggID, eventType)
		return err
	}

	for _, tt := range []struct {
		name                      string
		aggType, aggID, eventType string
		constraint                string
	}{
		{"control character in aggregate_id (the issue's E'nul\\u0001ctl')", "order", "nul\x01ctl", "created", "outbox_events_aggregate_id_printable"},
		{"tab in aggregate_id", "order", "o\t1", "created", "outbox_events_aggregate_id_printable"},
		{"newline at the end of aggregate_id", "order", "o-1\n", "created", "outbox_events_aggregate_id_printable"},
		{"DEL in aggregate_id", "order", "o\x7f1", "created", "outbox_events_aggregate_id_printable"},
		{"C1 control character in aggregate_id", "order", "o\u00851", "created", "outbox_events_aggregate_id_printable"},
		{"last C1 control character in aggregate_id", "order", "ü\u009f", "created", "outbox_events_aggregate_id_printable"},
		// Constraints are checked in the order of their names: _bytes first.
		{"aggregate_id over 200 characters", "order", strings.Repeat("a", 201), "created", "outbox_events_aggregate_id_bytes"},
		{"aggregate_id over 200 bytes in 101 characters", "order", strings.Repeat("é", 101), "created", "outbox_events_aggregate_id_bytes"},
		{"control character in aggregate_type", "ord\x01er", "o-1", "created", "outbox_events_aggregate_type_check"},
		{"newline at the end of aggregate_type", "order\n", "o-1", "created", "outbox_events_aggregate_type_check"},
		{"control character in event_type", "order", "o-1", "cre\x01ated", "outbox_events_event_type_check"},
		{"newline at the end of event_type", "order", "o-1", "created\n", "outbox_events_event_type_check"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			requireCheckViolation(t, insert(tt.aggType, tt.aggID, tt.eventType), tt.constraint)
		})
	}

	// The edges that must pass: every printable ASCII byte, 200 of them,
	// and printable characters outside ASCII up to 200 bytes (schema 0012):
	// the first and last after the C1 controls, a no-break space, a format
	// character, CJK, four-byte characters.
	passing := []string{printableASCII(), strings.Repeat("~", 200), "bestellung-ä", "\u00a0\u00ff", "a\u200bb",
		"製品-7", strings.Repeat("é", 100), strings.Repeat("🎫", 50), "\U0010fffd"}
	for _, id := range passing {
		require.NoError(t, insert("order", id, "created"), "%q", id)
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&n))
	require.Equal(t, len(passing), n)
}

// freshSchemaAt creates an empty schema and migrates it to version upto
// only, from the embedded files, with the same bookkeeping table and lock
// as schema.Migrate, which then applies the rest.
func freshSchemaAt(t *testing.T, upto int) *pgxpool.Pool {
	t.Helper()
	db := ferrytest.NewDB(t, "") // for a connection; the test's schema is a second one
	ctx := context.Background()
	name := ferrytest.Name("ferry_upgrade")
	_, err := db.Pool.Exec(ctx, "CREATE SCHEMA "+name)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE") })
	pool, err := pgxpool.New(ctx, ferrytest.WithSearchPath(ferrytest.PostgresURL(), name))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	migrateTo(t, pool, upto)
	return pool
}

// migrateTo applies the embedded migrations up to version upto only, with
// the same bookkeeping table and lock as schema.Migrate.
func migrateTo(t *testing.T, pool *pgxpool.Pool, upto int) {
	t.Helper()
	ms, err := schema.Migrations()
	require.NoError(t, err)
	older := fstest.MapFS{}
	for _, m := range ms[:upto] {
		older[fmt.Sprintf("m/%04d_%s.sql", m.Version, m.Name)] = &fstest.MapFile{Data: []byte(m.SQL)}
	}
	res, err := migrate.Apply(context.Background(), pool, migrate.Set{FS: older, Dir: "m", Table: "ferry_schema_migrations", Lock: "ferry.migrate:", Product: "Ferry"}, nil)
	require.NoError(t, err)
	require.Equal(t, upto, res.Current)
}

type upgradeRow struct {
	Status    string
	LastError *string
	Attempts  int
}

// Rows that an older schema accepted and Temporal refuses do not make the
// upgrade fail: the pending ones are quarantined with a reason an operator
// can act on, every other row is left exactly as it was, and from then on
// the database refuses new ones.
func TestMigration0007QuarantinesUndeliverablePendingRows(t *testing.T) {
	t.Parallel()
	pool := freshSchemaAt(t, 6)
	ctx := context.Background()

	insert := func(aggID, status string) string {
		t.Helper()
		var id string
		require.NoError(t, pool.QueryRow(ctx, `
			INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, attempts)
			VALUES ('order', $1, 'created', '{"n": 1}', $2, 3) RETURNING id::text`, aggID, status).Scan(&id))
		return id
	}
	badPending := insert("nul\x01ctl", "pending")
	nonASCIIPending := insert("bestellung-ä", "pending")
	goodPending := insert("o-1", "pending")
	badPublished := insert("pub\x02lished", "published")
	badDispatched := insert("dis\x03patched", "dispatched")
	read := func(id string) upgradeRow {
		t.Helper()
		var r upgradeRow
		require.NoError(t, pool.QueryRow(ctx, `SELECT status, last_error, attempts FROM outbox_events WHERE id = $1`, id).
			Scan(&r.Status, &r.LastError, &r.Attempts))
		return r
	}
	before := map[string]upgradeRow{}
	for _, id := range []string{goodPending, badPublished, badDispatched} {
		before[id] = read(id)
	}

	res, err := schema.Migrate(ctx, pool, nil)
	require.NoError(t, err, "violating rows must not fail the upgrade")
	require.Len(t, res.Applied, len(mustMigrations(t))-6)

	for _, id := range []string{badPending, nonASCIIPending} {
		r := read(id)
		require.Equal(t, "quarantined", r.Status, "row %s", id)
		require.NotNil(t, r.LastError)
		require.Contains(t, *r.LastError, "quarantined (InvalidAggregateID): aggregate_id has bytes outside printable ASCII")
		require.Equal(t, 3, r.Attempts)
	}
	bad := read(badPending)
	require.Contains(t, *bad.LastError, "which Temporal refuses in a workflow ID")
	require.Contains(t, *bad.LastError, "WHERE id = '"+badPending+"'", "the reason says how to give this very row up")
	// 0012 (TestMigration0012LeavesQuarantinedRowsToAnOperator): an id
	// outside ASCII is deliverable now, and its reason says so.
	require.Contains(t, *read(nonASCIIPending).LastError, "Ferry delivers this id now")
	for id, want := range before {
		require.Equal(t, want, read(id), "row %s must be untouched", id)
	}

	// The relay and retention still update the old rows the rule does not
	// bind (PostgreSQL checks every updated row, valid constraint or not).
	_, err = pool.Exec(ctx, `UPDATE outbox_events SET payload = 'null'::jsonb WHERE id = $1`, badPublished)
	require.NoError(t, err, "retention blanks an old row's payload")
	_, err = pool.Exec(ctx, `UPDATE outbox_events SET status = 'published', published_at = now() WHERE id = $1`, badDispatched)
	require.NoError(t, err, "its workflow marks an old dispatched row published")

	// A quarantined bad row cannot go back to the poller, a new one cannot
	// get in, and an operator can give one up.
	_, err = pool.Exec(ctx, `UPDATE outbox_events SET status = 'pending' WHERE id = $1`, badPending)
	requireCheckViolation(t, err, "outbox_events_aggregate_id_printable")
	_, err = pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', E'nul\u0001ctl', 'created', '{}')`)
	requireCheckViolation(t, err, "outbox_events_aggregate_id_printable")
	_, err = pool.Exec(ctx, `UPDATE outbox_events SET status = 'skipped' WHERE id = $1`, badPending)
	require.NoError(t, err, "the command the reason gives works")

	// What the migration's comment promises: validating later cannot fail.
	_, err = pool.Exec(ctx, `ALTER TABLE outbox_events VALIDATE CONSTRAINT outbox_events_aggregate_id_printable`)
	require.NoError(t, err)
}

func mustMigrations(t *testing.T) []schema.Migration {
	t.Helper()
	ms, err := schema.Migrations()
	require.NoError(t, err)
	return ms
}
