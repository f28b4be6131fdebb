package schema_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/schema"
)

// A producer writing plain SQL gets, for every rule of the headers column,
// an error under the constraint's name that says which header broke which
// rule. (outbox's TestHeaderRulesAgreeWithTheSchema holds the rules Go can
// express to agreement with package outbox; these are the ones only JSON
// can break, and one of each other rule.)
func TestInsertRefusesInvalidHeaders(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	insert := func(headers string) error {
		_, err := db.Pool.Exec(ctx,
			`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('order', 'o-1', 'created', '{"secret": "s3cr3t"}', $1::jsonb)`,
			headers)
		return err
	}
	many := make([]string, 33)
	for i := range many {
		many[i] = fmt.Sprintf(`"h%02d": "v"`, i)
	}
	for _, tt := range []struct {
		name, headers, want string
	}{
		{"an array", `["tenant"]`, "headers must be a JSON object of strings, not a JSON array"},
		{"a string", `"tenant=acme"`, "not a JSON string"},
		{"a number value", `{"tenant": 7}`, `header "tenant" is a JSON number, not a string`},
		{"a null value", `{"tenant": null}`, `header "tenant" is a JSON null, not a string`},
		{"an object value", `{"tenant": {"id": "acme"}}`, `header "tenant" is a JSON object, not a string`},
		{"a boolean value", `{"tenant": true}`, `header "tenant" is a JSON boolean, not a string`},
		{"too many", "{" + strings.Join(many, ", ") + "}", "33 headers, over the limit of 32"},
		{"too large", `{"note": "` + strings.Repeat("x", 8189) + `"}`, "header names and values are 8193 bytes, over the limit of 8192"},
		{"a bad name", `{"my tenant": "acme"}`, `header name "my tenant" is not allowed`},
		{"a reserved name", `{"Ferry-Aggregate-Version": "9"}`, `header "Ferry-Aggregate-Version" is reserved`},
		{"a broker's name", `{"x-death": "[]"}`, `header "x-death" is reserved`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := insert(tt.headers)
			requireCheckViolation(t, err, "outbox_events_headers_valid")
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "s3cr3t", "the failing row stays out of the error")
		})
	}

	// What passes: none, an empty object, the limits exactly.
	require.NoError(t, insert(`{"note": "`+strings.Repeat("x", 8188)+`"}`))
	require.NoError(t, insert("{"+strings.Join(many[:32], ", ")+"}"))
	require.NoError(t, insert(`{}`))
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'o-1', 'created', '{}')`)
	require.NoError(t, err)

	// Updates are checked too.
	_, err = db.Pool.Exec(ctx, `UPDATE outbox_events SET headers = '{"traceparent": "x"}'`)
	requireCheckViolation(t, err, "outbox_events_headers_valid")
}

// Upgrading a schema with rows to 0008 leaves every row as it was, with no
// headers; the relay's and retention's updates of those rows pass the new
// check, new rows are checked, and the constraint can be validated later,
// as the migration's comment says.
func TestMigration0008AddsHeadersToAFilledTable(t *testing.T) {
	t.Parallel()
	pool := freshSchemaAt(t, 7)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status)
		SELECT 'order', 'o-' || g, 'created', '{"n": 1}', CASE WHEN g % 2 = 0 THEN 'published' ELSE 'pending' END
		FROM generate_series(1, 100) g`)
	require.NoError(t, err)

	res, err := schema.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	require.Len(t, res.Applied, len(mustMigrations(t))-7)

	var withHeaders, validated int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE headers IS NOT NULL`).Scan(&withHeaders))
	require.Zero(t, withHeaders)
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(*) FROM pg_constraint WHERE conname = 'outbox_events_headers_valid' AND convalidated`).Scan(&validated))
	require.Zero(t, validated, "added NOT VALID: no scan under the migration's lock")

	_, err = pool.Exec(ctx, `UPDATE outbox_events SET status = 'published', published_at = now() WHERE status = 'pending'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE outbox_events SET payload = 'null'::jsonb`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('order', 'o-1', 'created', '{}', '{"message-id": "x"}')`)
	requireCheckViolation(t, err, "outbox_events_headers_valid")

	_, err = pool.Exec(ctx, `ALTER TABLE outbox_events VALIDATE CONSTRAINT outbox_events_headers_valid`)
	require.NoError(t, err)
}

// The producer role writes headers, from Go and from plain SQL, with the
// grants roles.sql gives it (INSERT on the table; the check's function is
// executable by anyone), and the relay role reads them back.
func TestRolesWriteAndReadHeaders(t *testing.T) {
	t.Parallel()
	r := setupRoles(t)
	ctx := context.Background()
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	headers := map[string]string{"tenant": "acme", "request-id": "r-1"}
	var got outbox.Written
	require.NoError(t, pgx.BeginFunc(ctx, r.pool(t, r.producer), func(tx pgx.Tx) error {
		got, err = w.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "created",
			Payload: json.RawMessage(`{}`), Headers: headers})
		return err
	}))
	require.NoError(t, r.as(t, r.producer,
		`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('order', '2', 'created', '{}', '{"tenant": "acme"}')`))
	requireCheckViolation(t, r.as(t, r.producer,
		`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('order', '2', 'created', '{}', '{"ferry-x": "y"}')`),
		"outbox_events_headers_valid")
	requireDenied(t, r.as(t, r.producer, `SELECT headers FROM outbox_events`), "read headers")
	requireDenied(t, r.as(t, r.relay, `UPDATE outbox_events SET headers = NULL`), "change headers")

	row, err := relaydb.LoadForPublish(ctx, r.pool(t, r.relay), got.ID.String())
	require.NoError(t, err)
	require.Equal(t, headers, row.Headers)
}
