package outbox_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/relaydb"
)

// manyHeaders is n headers h00, h01, … with value v.
func manyHeaders(n int, v string) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("h%02d", i)] = v
	}
	return h
}

// headerCase is one set of headers and what both the Go rules and the
// schema's check say about it: want is "" for accepted, else a text both
// errors contain (the header they name, or the limit).
type headerCase struct {
	name    string
	headers map[string]string
	want    string
}

// headerCases are expressible both as a Go map and as jsonb: every rule of
// the two, and the edges that pass.
func headerCases() []headerCase {
	// 16 headers of 3-byte names (h00…h15) and 509-byte values: 8192 bytes.
	atLimit := manyHeaders(16, strings.Repeat("v", 509))
	overLimit := manyHeaders(16, strings.Repeat("v", 509))
	overLimit["h15"] += "v"
	return []headerCase{
		{"one header", map[string]string{"tenant": "acme"}, ""},
		{"name of every allowed character", map[string]string{"Aa0_.-z9": "x"}, ""},
		{"name of 64 characters", map[string]string{strings.Repeat("n", 64): "x"}, ""},
		{"empty value", map[string]string{"note": ""}, ""},
		{"value with quotes, backslash, control characters and non-ASCII", map[string]string{"note": "a\"b\\c\n\td\x01 – ünïcode ✓"}, ""},
		{"32 headers", manyHeaders(32, "v"), ""},
		{"names and values of exactly 8192 bytes", atLimit, ""},
		{"a name that contains a reserved word", map[string]string{"my-ferry-id": "x", "tracestate2": "y"}, ""},
		{"empty object", map[string]string{}, ""},

		{"33 headers", manyHeaders(33, "v"), "over the limit of 32"},
		{"names and values of 8193 bytes", overLimit, "over the limit of 8192"},
		{"name of 65 characters", map[string]string{strings.Repeat("n", 65): "x"}, `header name "` + strings.Repeat("n", 65) + `" is not allowed`},
		{"empty name", map[string]string{"": "x"}, `header name "" is not allowed`},
		{"name starting with '-'", map[string]string{"-tenant": "x"}, `header name "-tenant" is not allowed`},
		{"name starting with '_'", map[string]string{"_tenant": "x"}, `header name "_tenant" is not allowed`},
		{"space in a name", map[string]string{"my tenant": "x"}, `header name "my tenant" is not allowed`},
		{"colon in a name", map[string]string{"tenant:id": "x"}, `header name "tenant:id" is not allowed`},
		{"non-ASCII name", map[string]string{"mandant-ä": "x"}, `header name "mandant-ä" is not allowed`},
		{"ferry- prefix", map[string]string{"ferry-tenant": "x"}, `header "ferry-tenant" is reserved`},
		{"Ferry's aggregate id header", map[string]string{"ferry-aggregate-id": "x"}, `header "ferry-aggregate-id" is reserved`},
		{"Ferry's prefix in upper case", map[string]string{"FERRY-Aggregate-ID": "x"}, `header "FERRY-Aggregate-ID" is reserved`},
		{"the consumer's parked reason", map[string]string{"ferry-parked-reason": "x"}, `header "ferry-parked-reason" is reserved`},
		{"x- prefix", map[string]string{"X-Request-Id": "x"}, `header "X-Request-Id" is reserved`},
		{"RabbitMQ's delivery count", map[string]string{"x-delivery-count": "99"}, `header "x-delivery-count" is reserved`},
		{"message_id", map[string]string{"message_id": "x"}, `header "message_id" is reserved`},
		{"Message-ID", map[string]string{"Message-ID": "x"}, `header "Message-ID" is reserved`},
		{"traceparent", map[string]string{"traceparent": "00-x"}, `header "traceparent" is reserved`},
		{"TraceState", map[string]string{"TraceState": "x"}, `header "TraceState" is reserved`},
		{"the first bad header in key order is named", map[string]string{"zz": "ok", "ferry-b": "x", "ferry-a": "x"}, `header "ferry-a" is reserved`},
		{"a short bad name before a long good one", map[string]string{"a-very-long-good-name": "x", "x-y": "x"}, `header "x-y" is reserved`},
	}
}

func TestValidateHeaders(t *testing.T) {
	t.Parallel()
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	cases := append(headerCases(),
		// Only Go can say these; jsonb cannot hold them.
		headerCase{"value not UTF-8", map[string]string{"tenant": "a\xffb"}, `header "tenant" is not valid UTF-8`},
		headerCase{"NUL byte in a value", map[string]string{"tenant": "a\x00b"}, `header "tenant" contains a NUL byte`},
		headerCase{"nil", nil, ""},
	)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := outbox.ValidateHeaders(tt.headers)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
			require.ErrorContains(t, err, "Headers: ")
			require.ErrorContains(t, err, tt.want)
			for _, v := range tt.headers {
				if len(v) > 3 {
					require.NotContains(t, err.Error(), v, "values stay out of the message")
				}
			}

			// Validate, Write and WriteBatch say the same, before the database.
			ev := event("order", "o-1")
			ev.Headers = tt.headers
			require.Equal(t, err, w.Validate(ev))
			db := &noDB{}
			_, err = w.WriteBatch(t.Context(), db, []outbox.Event{event("order", "o-1"), ev})
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
			require.ErrorContains(t, err, "event 1 of the batch")
			require.ErrorContains(t, err, tt.want)
			require.Zero(t, db.calls)
		})
	}
}

// The Go rules and the schema's check are one rule: for every case, a
// producer writing plain SQL gets the same verdict as Writer.Validate, and
// a refusal names the same header, under the constraint's name.
func TestHeaderRulesAgreeWithTheSchema(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	for _, tt := range headerCases() {
		t.Run(tt.name, func(t *testing.T) {
			goErr := outbox.ValidateHeaders(tt.headers)
			doc, err := json.Marshal(tt.headers)
			require.NoError(t, err)
			tx := begin(t, db)
			_, sqlErr := tx.Exec(t.Context(),
				`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('order', 'o-1', 'created', '{}', $1::jsonb)`,
				string(doc))
			require.NoError(t, tx.Rollback(t.Context()))
			if tt.want == "" {
				require.NoError(t, goErr)
				require.NoError(t, sqlErr)
				return
			}
			require.ErrorContains(t, goErr, tt.want)
			var pgErr *pgconn.PgError
			require.True(t, errors.As(sqlErr, &pgErr), "want a check violation, got %v", sqlErr)
			require.Equal(t, "23514", pgErr.Code, "%v", sqlErr)
			require.Equal(t, "outbox_events_headers_valid", pgErr.ConstraintName)
			require.Contains(t, pgErr.Message, "outbox_events_headers_valid")
			require.Contains(t, pgErr.Message, tt.want)
			require.Empty(t, pgErr.Detail, "the failing row, payload included, stays out of the error")
		})
	}
}

// Headers are stored with the event, read back by the publish side, and an
// event without headers stores NULL, in one batch insert.
func TestWriteStoresHeaders(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := t.Context()

	with := event("order", "o-1")
	with.Headers = map[string]string{"tenant": "acme", "Correlation.ID": "c-1 ✓", "note": "a\"b\\c\n"}
	empty := event("order", "o-1")
	empty.Headers = map[string]string{}
	none := event("order", "o-2")
	got := commit(t, db, w, with, empty, none)

	var raw *string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT headers::text FROM outbox_events WHERE id = $1`, got[0].ID).Scan(&raw))
	require.NotNil(t, raw)
	require.JSONEq(t, `{"tenant": "acme", "Correlation.ID": "c-1 ✓", "note": "a\"b\\c\n"}`, *raw)
	for _, written := range got[1:] {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT headers::text FROM outbox_events WHERE id = $1`, written.ID).Scan(&raw))
		require.Nil(t, raw, "no headers is NULL")
	}

	row, err := relaydb.LoadForPublish(ctx, db.Pool, got[0].ID.String())
	require.NoError(t, err)
	require.Equal(t, with.Headers, row.Headers)
	rows, err := relaydb.LoadManyForPublish(ctx, db.Pool, []string{got[0].ID.String(), got[1].ID.String(), got[2].ID.String()})
	require.NoError(t, err)
	require.Equal(t, with.Headers, rows[got[0].ID.String()].Headers)
	require.Nil(t, rows[got[1].ID.String()].Headers)
	require.Nil(t, rows[got[2].ID.String()].Headers)
}

// An old schema (before 0008) gets the usual hint rather than a bare
// "column does not exist".
func TestWriteOnASchemaWithoutHeadersSaysMigrate(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, `ALTER TABLE outbox_events DROP COLUMN headers`)
	require.NoError(t, err)
	tx := begin(t, db)
	_, err = w.Write(ctx, tx, event("order", "o-1"))
	require.ErrorContains(t, err, "run `ferry migrate`")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42703", pgErr.Code)
	require.NoError(t, tx.Rollback(ctx))
	n, err := pgx.CollectExactlyOneRow(query(t, db, `SELECT count(*) FROM outbox_events`), pgx.RowTo[int64])
	require.NoError(t, err)
	require.Zero(t, n)
}
