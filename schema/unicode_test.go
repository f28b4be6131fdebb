package schema_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/schema"
)

// Upgrading to 0012 leaves every row where it is: the rows 0007
// quarantined as InvalidAggregateID stay quarantined (an operator may have
// written their events again under another id, as 0007's reason said), and
// those whose id is deliverable now get a reason that says so and names
// the two repairs; the others keep 0007's reason. From then on ids outside
// ASCII go in, a row whose id is deliverable can go back to pending, and
// what is still refused is refused naming its constraint.
func TestMigration0012LeavesQuarantinedRowsToAnOperator(t *testing.T) {
	t.Parallel()
	pool := freshSchemaAt(t, 6)
	ctx := context.Background()
	insert := func(aggID, status, lastError string) string {
		t.Helper()
		var id string
		require.NoError(t, pool.QueryRow(ctx, `
			INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, attempts, last_error)
			VALUES ('order', $1, 'created', '{"n": 1}', $2, 3, nullif($3, '')) RETURNING id::text`, aggID, status, lastError).Scan(&id))
		return id
	}
	long := strings.Repeat("長", 70) // 70 characters, 210 bytes: 0001 takes it, 0012 does not
	control := insert("nul\x01ctl", "pending", "")
	unicode := insert("müller", "pending", "")
	tooLong := insert(long, "pending", "")
	published := insert(long, "published", "")
	otherClass := insert("o-2", "quarantined", "quarantined (Unroutable): no queue is bound")
	good := insert("o-1", "pending", "")
	migrateTo(t, pool, 11)

	type row struct {
		Status    string
		LastError string
		Attempts  int
	}
	read := func(id string) row {
		t.Helper()
		var r row
		require.NoError(t, pool.QueryRow(ctx, `SELECT status, coalesce(last_error, ''), attempts FROM outbox_events WHERE id = $1`, id).
			Scan(&r.Status, &r.LastError, &r.Attempts))
		return r
	}
	before := map[string]row{}
	for _, id := range []string{control, unicode, tooLong, published, otherClass, good} {
		before[id] = read(id)
	}
	require.Equal(t, "quarantined", before[unicode].Status, "0007 quarantined it")

	res, err := schema.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, 12, res.Applied[0].Version)

	after := read(unicode)
	require.Equal(t, "quarantined", after.Status, "no event is sent without an operator")
	require.Equal(t, 3, after.Attempts)
	require.True(t, strings.HasPrefix(after.LastError, "quarantined (InvalidAggregateID): "), "the class stays: %s", after.LastError)
	require.Contains(t, after.LastError, "Ferry delivers this id now")
	require.Contains(t, after.LastError, "ferry repair "+unicode+" --action retry --reason")
	require.Contains(t, after.LastError, "ferry repair "+unicode+" --action skip --reason")
	for _, id := range []string{control, tooLong, published, otherClass, good} {
		require.Equal(t, before[id], read(id), "row %s must be untouched", id)
	}

	// What an operator's retry does to the deliverable row, and what the
	// constraints say to the others.
	_, err = pool.Exec(ctx, `UPDATE outbox_events SET status = 'pending' WHERE id = $1`, unicode)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE outbox_events SET status = 'pending' WHERE id = $1`, control)
	requireCheckViolation(t, err, "outbox_events_aggregate_id_printable")
	_, err = pool.Exec(ctx, `UPDATE outbox_events SET status = 'pending' WHERE id = $1`, tooLong)
	requireCheckViolation(t, err, "outbox_events_aggregate_id_bytes")
	// Old rows past pending are still updated by the relay and retention.
	_, err = pool.Exec(ctx, `UPDATE outbox_events SET payload = 'null'::jsonb WHERE id = $1`, published)
	require.NoError(t, err)
	insert("müller", "pending", "")

	// What the migration's comment promises: validating later cannot fail.
	for _, c := range []string{"outbox_events_aggregate_id_printable", "outbox_events_aggregate_id_bytes"} {
		_, err = pool.Exec(ctx, `ALTER TABLE outbox_events VALIDATE CONSTRAINT `+c)
		require.NoError(t, err, c)
	}
}

// In a database whose encoding is not UTF8 the bytes of a text column need
// not be UTF-8: 0012 keeps 0007's rule there, printable ASCII.
func TestMigration0012KeepsASCIIOutsideUTF8Databases(t *testing.T) {
	t.Parallel()
	pg := servers.StartPrivatePostgres(t)
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, pg.URL)
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Exec(ctx, `CREATE DATABASE latin ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`)
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, strings.TrimSuffix(pg.URL, "/postgres")+"/latin")
	require.NoError(t, err)
	defer pool.Close()
	_, err = schema.Migrate(ctx, pool, nil)
	require.NoError(t, err)

	insert := func(aggID string) error {
		_, err := pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'created', '{}')`, aggID)
		return err
	}
	require.NoError(t, insert(printableASCII()))
	requireCheckViolation(t, insert("müller"), "outbox_events_aggregate_id_printable")
	requireCheckViolation(t, insert("o\x011"), "outbox_events_aggregate_id_printable")
}
