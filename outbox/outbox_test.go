package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/outbox"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup gives a test its own migrated schema and a Writer with defaults.
func setup(t *testing.T) (*ferrytest.DB, *outbox.Writer) {
	t.Helper()
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	return ferrytest.NewDB(t, ""), w
}

func event(aggType, aggID string) outbox.Event {
	return outbox.Event{
		AggregateType: aggType,
		AggregateID:   aggID,
		EventType:     "created",
		Payload:       []byte(`{"n":1}`),
	}
}

// begin starts a transaction that is rolled back at the end of the test
// unless committed. A failed require must not leave a connection checked
// out: testenv's cleanup closes the pool, and Close waits for it.
func begin(t *testing.T, db *ferrytest.DB) pgx.Tx {
	t.Helper()
	tx, err := db.Pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// commit writes events in one transaction and commits it.
func commit(t *testing.T, db *ferrytest.DB, w *outbox.Writer, events ...outbox.Event) []outbox.Written {
	t.Helper()
	ctx := t.Context()
	tx := begin(t, db)
	out, err := w.WriteBatch(ctx, tx, events)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return out
}

// writeErr runs events in a transaction that is rolled back, returning
// WriteBatch's error.
func writeErr(t *testing.T, db *ferrytest.DB, w *outbox.Writer, events ...outbox.Event) error {
	t.Helper()
	ctx := t.Context()
	tx := begin(t, db)
	_, err := w.WriteBatch(ctx, tx, events)
	require.Error(t, err)
	require.NoError(t, tx.Rollback(ctx))
	return err
}

// versions lists the committed versions of one aggregate, in order.
func versions(t *testing.T, db *ferrytest.DB, aggType, aggID string) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(t.Context(),
		`SELECT aggregate_version FROM outbox_events
		 WHERE aggregate_type = $1 AND aggregate_id = $2 ORDER BY aggregate_version`, aggType, aggID)
	require.NoError(t, err)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return vs
}

type storedRow struct {
	AggregateType    string
	AggregateID      string
	AggregateVersion int64
	EventType        string
	SchemaVersion    int
	Payload          string
	TraceParent      *string
	TraceState       *string
	Status           string
	Attempts         int
}

func readRow(t *testing.T, db *ferrytest.DB, id uuid.UUID) storedRow {
	t.Helper()
	var r storedRow
	err := db.Pool.QueryRow(t.Context(), `
		SELECT aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
		       payload::text, trace_parent, trace_state, status, attempts
		FROM outbox_events WHERE id = $1`, id).Scan(
		&r.AggregateType, &r.AggregateID, &r.AggregateVersion, &r.EventType, &r.SchemaVersion,
		&r.Payload, &r.TraceParent, &r.TraceState, &r.Status, &r.Attempts)
	require.NoError(t, err, "row %s", id)
	return r
}

// noDB is a DBTX that records being used: validation must reject a bad
// event before anything reaches the database.
type noDB struct{ calls int }

func (d *noDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	d.calls++
	return pgconn.CommandTag{}, errors.New("noDB: unexpected Exec")
}

func (d *noDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	d.calls++
	return nil, errors.New("noDB: unexpected Query")
}

func TestNewWriterConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       outbox.Config
		wantField string // "" means valid
	}{
		{name: "zero config takes defaults", cfg: outbox.Config{}},
		{name: "payload limit at 16 MiB", cfg: outbox.Config{MaxPayloadBytes: 16 << 20}},
		{name: "payload limit over 16 MiB", cfg: outbox.Config{MaxPayloadBytes: 16<<20 + 1}, wantField: "MaxPayloadBytes"},
		{name: "negative payload limit", cfg: outbox.Config{MaxPayloadBytes: -1}, wantField: "MaxPayloadBytes"},
		{name: "negative batch limit", cfg: outbox.Config{MaxBatch: -1}, wantField: "MaxBatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := outbox.NewWriter(tt.cfg)
			if tt.wantField == "" {
				require.NoError(t, err)
				require.NotNil(t, w)
				return
			}
			require.Error(t, err)
			require.Nil(t, w)
			require.Contains(t, err.Error(), tt.wantField)
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	w, err := outbox.NewWriter(outbox.Config{MaxPayloadBytes: 64})
	require.NoError(t, err)

	tests := []struct {
		name      string
		mutate    func(*outbox.Event)
		wantField string // "" means valid
	}{
		{name: "valid", mutate: func(*outbox.Event) {}},
		{name: "valid with every field set", mutate: func(e *outbox.Event) {
			e.ID, e.AggregateVersion, e.SchemaVersion = uuid.New(), 7, 2
			e.AggregateType, e.EventType = "Billing.invoice_v2-x", "line.added"
		}},
		{name: "AggregateID of exactly 200 bytes", mutate: func(e *outbox.Event) { e.AggregateID = strings.Repeat("~", 200) }},
		{name: "AggregateID of every printable ASCII byte", mutate: func(e *outbox.Event) { e.AggregateID = printableASCII() }},
		{name: "AggregateID outside ASCII", mutate: func(e *outbox.Event) { e.AggregateID = "bestellung-ä" }},
		{name: "AggregateID of 100 two-byte runes", mutate: func(e *outbox.Event) { e.AggregateID = strings.Repeat("é", 100) }},
		{name: "AggregateID in Japanese", mutate: func(e *outbox.Event) { e.AggregateID = "製品-7" }},
		{name: "AggregateID of four-byte runes", mutate: func(e *outbox.Event) { e.AggregateID = strings.Repeat("🎫", 50) }},
		{name: "AggregateID with a no-break space", mutate: func(e *outbox.Event) { e.AggregateID = "a\u00a0b" }},
		{name: "AggregateID with a format character", mutate: func(e *outbox.Event) { e.AggregateID = "a\u200bb" }},
		{name: "AggregateID with U+FFFD itself", mutate: func(e *outbox.Event) { e.AggregateID = "a\ufffdb" }},
		{name: "payload of exactly the limit", mutate: func(e *outbox.Event) { e.Payload = []byte(`"` + strings.Repeat("x", 62) + `"`) }},
		{name: "AggregateType of exactly 100 bytes", mutate: func(e *outbox.Event) { e.AggregateType = strings.Repeat("a", 100) }},

		{name: "empty AggregateType", mutate: func(e *outbox.Event) { e.AggregateType = "" }, wantField: "AggregateType"},
		{name: "space in AggregateType", mutate: func(e *outbox.Event) { e.AggregateType = "an order" }, wantField: "AggregateType"},
		{name: "slash in AggregateType", mutate: func(e *outbox.Event) { e.AggregateType = "order/v2" }, wantField: "AggregateType"},
		{name: "non-ASCII AggregateType", mutate: func(e *outbox.Event) { e.AggregateType = "ordér" }, wantField: "AggregateType"},
		{name: "AggregateType over 100 bytes", mutate: func(e *outbox.Event) { e.AggregateType = strings.Repeat("a", 101) }, wantField: "AggregateType"},
		{name: "empty AggregateID", mutate: func(e *outbox.Event) { e.AggregateID = "" }, wantField: "AggregateID"},
		{name: "AggregateID over 200 bytes", mutate: func(e *outbox.Event) { e.AggregateID = strings.Repeat("a", 201) }, wantField: "AggregateID"},
		{name: "AggregateID of 101 two-byte runes", mutate: func(e *outbox.Event) { e.AggregateID = strings.Repeat("é", 101) }, wantField: "AggregateID"},
		{name: "AggregateID not UTF-8", mutate: func(e *outbox.Event) { e.AggregateID = "o-\xff" }, wantField: "AggregateID"},
		{name: "AggregateID with a cut UTF-8 sequence", mutate: func(e *outbox.Event) { e.AggregateID = "m\xc3ller" }, wantField: "AggregateID"},
		{name: "AggregateID with an encoded surrogate", mutate: func(e *outbox.Event) { e.AggregateID = "o-\xed\xa0\x80" }, wantField: "AggregateID"},
		{name: "C1 control character in AggregateID", mutate: func(e *outbox.Event) { e.AggregateID = "o\u00851" }, wantField: "AggregateID"},
		{name: "last C1 control character in AggregateID", mutate: func(e *outbox.Event) { e.AggregateID = "o\u009f" }, wantField: "AggregateID"},
		{name: "NUL byte in AggregateID", mutate: func(e *outbox.Event) { e.AggregateID = "o-\x001" }, wantField: "AggregateID"},
		{name: "control character in AggregateID", mutate: func(e *outbox.Event) { e.AggregateID = "nul\x01ctl" }, wantField: "AggregateID"},
		{name: "tab in AggregateID", mutate: func(e *outbox.Event) { e.AggregateID = "o\t1" }, wantField: "AggregateID"},
		{name: "DEL in AggregateID", mutate: func(e *outbox.Event) { e.AggregateID = "o\x7f1" }, wantField: "AggregateID"},
		{name: "control character in AggregateType", mutate: func(e *outbox.Event) { e.AggregateType = "ord\x01er" }, wantField: "AggregateType"},
		{name: "newline at the end of AggregateType", mutate: func(e *outbox.Event) { e.AggregateType = "order\n" }, wantField: "AggregateType"},
		{name: "control character in EventType", mutate: func(e *outbox.Event) { e.EventType = "cre\x01ated" }, wantField: "EventType"},
		{name: "empty EventType", mutate: func(e *outbox.Event) { e.EventType = "" }, wantField: "EventType"},
		{name: "colon in EventType", mutate: func(e *outbox.Event) { e.EventType = "order:created" }, wantField: "EventType"},
		{name: "wildcard in EventType", mutate: func(e *outbox.Event) { e.EventType = "created.*" }, wantField: "EventType"},
		{name: "negative AggregateVersion", mutate: func(e *outbox.Event) { e.AggregateVersion = -1 }, wantField: "AggregateVersion"},
		{name: "negative SchemaVersion", mutate: func(e *outbox.Event) { e.SchemaVersion = -3 }, wantField: "SchemaVersion"},
		{name: "SchemaVersion over the integer column", mutate: func(e *outbox.Event) { e.SchemaVersion = math.MaxInt32 + 1 }, wantField: "SchemaVersion"},
		{name: "nil payload", mutate: func(e *outbox.Event) { e.Payload = nil }, wantField: "Payload"},
		{name: "empty payload", mutate: func(e *outbox.Event) { e.Payload = []byte{} }, wantField: "Payload"},
		{name: "invalid JSON payload", mutate: func(e *outbox.Event) { e.Payload = []byte(`{"n":`) }, wantField: "Payload"},
		{name: "two JSON documents", mutate: func(e *outbox.Event) { e.Payload = []byte(`{} {}`) }, wantField: "Payload"},
		{name: "NUL escape jsonb rejects", mutate: func(e *outbox.Event) { e.Payload = []byte(`{"a":"x\u0000y"}`) }, wantField: "Payload"},
		{name: "payload one byte over the limit", mutate: func(e *outbox.Event) { e.Payload = []byte(`"` + strings.Repeat("x", 63) + `"`) }, wantField: "Payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := event("order", "o-1")
			tt.mutate(&ev)

			err := w.Validate(ev)
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
			require.Contains(t, err.Error(), tt.wantField)

			// Write and WriteBatch reject it too, without touching the database.
			db := &noDB{}
			_, err = w.Write(t.Context(), db, ev)
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
			require.Contains(t, err.Error(), tt.wantField)

			_, err = w.WriteBatch(t.Context(), db, []outbox.Event{event("order", "o-1"), ev})
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
			require.Contains(t, err.Error(), tt.wantField)
			require.Contains(t, err.Error(), "event 1 of the batch")
			require.Zero(t, db.calls)
		})
	}
}

// What Validate says about an aggregate id no workflow ID can carry names
// the problem and where it is.
func TestValidateNamesTheAggregateIDProblem(t *testing.T) {
	t.Parallel()
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	for id, want := range map[string]string{
		"m\xc3ller":             "AggregateID has byte 0xc3 at offset 1, which is not valid UTF-8",
		"müller\xff":            "AggregateID has byte 0xff at offset 7, which is not valid UTF-8",
		"o\t1":                  "AggregateID has control character U+0009 at offset 1: use printable characters",
		"ü\u0085":               "AggregateID has control character U+0085 at offset 2: use printable characters",
		strings.Repeat("製", 67): "AggregateID is 201 bytes of UTF-8, over the limit of 200",
	} {
		require.EqualError(t, w.Validate(event("order", id)), "invalid outbox event: "+want, "%q", id)
	}
}

func TestWriteBatchLimits(t *testing.T) {
	t.Parallel()
	w, err := outbox.NewWriter(outbox.Config{MaxBatch: 2})
	require.NoError(t, err)
	db := &noDB{}

	_, err = w.WriteBatch(t.Context(), db, nil)
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	require.Contains(t, err.Error(), "empty")

	ev := event("order", "o-1")
	_, err = w.WriteBatch(t.Context(), db, []outbox.Event{ev, ev, ev})
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	require.Contains(t, err.Error(), "MaxBatch")
	require.Zero(t, db.calls)
}

func TestWriteCommitStoresRow(t *testing.T) {
	t.Parallel()
	db, w := setup(t)

	ev := event("order", "o-1")
	ev.Payload = []byte(`{"total": 12.5, "lines": [{"sku": "a"}, {"sku": "b"}], "note": null}`)
	got := commit(t, db, w, ev)
	require.Len(t, got, 1)
	require.Equal(t, uuid.Version(7), got[0].ID.Version(), "a generated id is a UUIDv7")
	require.Equal(t, int64(1), got[0].AggregateVersion)

	r := readRow(t, db, got[0].ID)
	require.Equal(t, "order", r.AggregateType)
	require.Equal(t, "o-1", r.AggregateID)
	require.Equal(t, int64(1), r.AggregateVersion)
	require.Equal(t, "created", r.EventType)
	require.Equal(t, 1, r.SchemaVersion, "zero SchemaVersion is stored as 1")
	require.JSONEq(t, string(ev.Payload), r.Payload)
	require.Equal(t, "pending", r.Status)
	require.Equal(t, 0, r.Attempts)
	require.Nil(t, r.TraceParent)
	require.Nil(t, r.TraceState)

	// The caller's id and schema version are kept as given.
	id := uuid.New()
	ev2 := outbox.Event{ID: id, AggregateType: "order", AggregateID: "o-1", EventType: "paid", SchemaVersion: 3, Payload: []byte(`[1,2,3]`)}
	got = commit(t, db, w, ev2)
	require.Equal(t, []outbox.Written{{ID: id, AggregateVersion: 2}}, got)
	r = readRow(t, db, id)
	require.Equal(t, "paid", r.EventType)
	require.Equal(t, 3, r.SchemaVersion)
	require.Equal(t, int64(2), r.AggregateVersion)
	require.JSONEq(t, `[1,2,3]`, r.Payload)

	var last, delivered int64
	require.NoError(t, db.Pool.QueryRow(t.Context(),
		`SELECT last_version, delivered_version FROM outbox_aggregates WHERE aggregate_type = 'order' AND aggregate_id = 'o-1'`,
	).Scan(&last, &delivered))
	require.Equal(t, int64(2), last)
	require.Equal(t, int64(0), delivered)
}

func TestWriteRollbackLeavesNothing(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := t.Context()

	tx := begin(t, db)
	got, err := w.WriteBatch(ctx, tx, []outbox.Event{event("order", "o-1"), event("order", "o-1")})
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2}, []int64{got[0].AggregateVersion, got[1].AggregateVersion})
	require.NoError(t, tx.Rollback(ctx))

	var events, aggregates int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&events))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_aggregates`).Scan(&aggregates))
	require.Zero(t, events)
	require.Zero(t, aggregates, "the counter row is rolled back with the event")

	// The rolled-back versions are given back.
	written := commit(t, db, w, event("order", "o-1"))
	require.Equal(t, int64(1), written[0].AggregateVersion)
	require.Equal(t, []int64{1}, versions(t, db, "order", "o-1"))

	// Also for an aggregate whose counter row already exists.
	tx = begin(t, db)
	_, err = w.Write(ctx, tx, event("order", "o-1"))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	written = commit(t, db, w, event("order", "o-1"))
	require.Equal(t, int64(2), written[0].AggregateVersion)
	require.Equal(t, []int64{1, 2}, versions(t, db, "order", "o-1"))
}

func TestAutoVersionsAcrossTransactions(t *testing.T) {
	t.Parallel()
	db, w := setup(t)

	for want := int64(1); want <= 3; want++ {
		got := commit(t, db, w, event("order", "o-1"))
		require.Equal(t, want, got[0].AggregateVersion)
	}
	// Another aggregate, and the same id under another type, count separately.
	require.Equal(t, int64(1), commit(t, db, w, event("order", "o-2"))[0].AggregateVersion)
	require.Equal(t, int64(1), commit(t, db, w, event("invoice", "o-1"))[0].AggregateVersion)
	require.Equal(t, []int64{1, 2, 3}, versions(t, db, "order", "o-1"))
}

func TestWriteBatchOneAggregate(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	commit(t, db, w, event("order", "o-1"))

	events := make([]outbox.Event, 5)
	for i := range events {
		events[i] = event("order", "o-1")
		events[i].EventType = fmt.Sprintf("step%d", i)
	}
	fixed := uuid.New()
	events[2].ID = fixed

	got := commit(t, db, w, events...)
	require.Len(t, got, 5)
	require.Equal(t, fixed, got[2].ID)
	for i, wr := range got {
		require.Equal(t, int64(i+2), wr.AggregateVersion, "event %d", i)
		r := readRow(t, db, wr.ID)
		require.Equal(t, fmt.Sprintf("step%d", i), r.EventType, "Written %d names the row of input event %d", i, i)
		require.Equal(t, wr.AggregateVersion, r.AggregateVersion)
	}
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, versions(t, db, "order", "o-1"))
}

func TestWriteBatchMixedAggregates(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	commit(t, db, w, event("order", "a"))

	events := []outbox.Event{
		event("order", "a"), event("order", "b"), event("order", "a"),
		event("invoice", "a"), event("order", "b"), event("order", "a"),
	}
	got := commit(t, db, w, events...)
	gotVersions := make([]int64, len(got))
	for i, wr := range got {
		gotVersions[i] = wr.AggregateVersion
		r := readRow(t, db, wr.ID)
		require.Equal(t, events[i].AggregateType, r.AggregateType, "event %d", i)
		require.Equal(t, events[i].AggregateID, r.AggregateID, "event %d", i)
	}
	require.Equal(t, []int64{2, 1, 3, 1, 2, 4}, gotVersions)
	require.Equal(t, []int64{1, 2, 3, 4}, versions(t, db, "order", "a"))
	require.Equal(t, []int64{1, 2}, versions(t, db, "order", "b"))
	require.Equal(t, []int64{1}, versions(t, db, "invoice", "a"))
}

func withVersion(ev outbox.Event, v int64) outbox.Event {
	ev.AggregateVersion = v
	return ev
}

func TestCallerSuppliedVersions(t *testing.T) {
	t.Parallel()

	t.Run("next version", func(t *testing.T) {
		t.Parallel()
		db, w := setup(t)
		require.Equal(t, int64(1), commit(t, db, w, withVersion(event("order", "o-1"), 1))[0].AggregateVersion)
		require.Equal(t, int64(2), commit(t, db, w, withVersion(event("order", "o-1"), 2))[0].AggregateVersion)
		require.Equal(t, int64(3), commit(t, db, w, event("order", "o-1"))[0].AggregateVersion)
		require.Equal(t, int64(4), commit(t, db, w, withVersion(event("order", "o-1"), 4))[0].AggregateVersion)
		require.Equal(t, []int64{1, 2, 3, 4}, versions(t, db, "order", "o-1"))
	})

	t.Run("taken version conflicts", func(t *testing.T) {
		t.Parallel()
		db, w := setup(t)
		commit(t, db, w, event("order", "o-77"), event("order", "o-77"))

		for _, v := range []int64{1, 2} {
			err := writeErr(t, db, w, withVersion(event("order", "o-77"), v))
			require.ErrorIs(t, err, outbox.ErrVersionConflict)
			require.NotErrorIs(t, err, outbox.ErrVersionGap)
			require.Contains(t, err.Error(), "order/o-77")
			require.Contains(t, err.Error(), "at version 2")
		}
		// The failed transactions changed nothing.
		require.Equal(t, int64(3), commit(t, db, w, event("order", "o-77"))[0].AggregateVersion)
	})

	t.Run("skipped version is a gap", func(t *testing.T) {
		t.Parallel()
		db, w := setup(t)
		commit(t, db, w, event("order", "o-1"))

		err := writeErr(t, db, w, withVersion(event("order", "o-1"), 3))
		require.ErrorIs(t, err, outbox.ErrVersionGap)
		require.NotErrorIs(t, err, outbox.ErrVersionConflict)
		require.Contains(t, err.Error(), "order/o-1")
		require.Contains(t, err.Error(), "next version is 2")
		require.Equal(t, []int64{1}, versions(t, db, "order", "o-1"))
	})

	t.Run("gap inside a batch fails the whole batch", func(t *testing.T) {
		t.Parallel()
		db, w := setup(t)
		err := writeErr(t, db, w, event("order", "o-1"), withVersion(event("order", "o-1"), 2), withVersion(event("order", "o-1"), 4))
		require.ErrorIs(t, err, outbox.ErrVersionGap)
		require.Empty(t, versions(t, db, "order", "o-1"))
	})

	t.Run("explicit and assigned versions mix in a batch", func(t *testing.T) {
		t.Parallel()
		db, w := setup(t)
		got := commit(t, db, w, event("order", "o-1"), withVersion(event("order", "o-1"), 2), event("order", "o-1"))
		require.Equal(t, []int64{1, 2, 3}, []int64{got[0].AggregateVersion, got[1].AggregateVersion, got[2].AggregateVersion})
	})

	t.Run("a new aggregate may start at any version", func(t *testing.T) {
		t.Parallel()
		db, w := setup(t)
		require.Equal(t, int64(57), commit(t, db, w, withVersion(event("order", "o-1"), 57))[0].AggregateVersion)
		require.Equal(t, int64(58), commit(t, db, w, event("order", "o-1"))[0].AggregateVersion)
		require.Equal(t, int64(59), commit(t, db, w, withVersion(event("order", "o-1"), 59))[0].AggregateVersion)

		err := writeErr(t, db, w, withVersion(event("order", "o-1"), 57))
		require.ErrorIs(t, err, outbox.ErrVersionConflict)
		err = writeErr(t, db, w, withVersion(event("order", "o-1"), 61))
		require.ErrorIs(t, err, outbox.ErrVersionGap)
		require.Equal(t, []int64{57, 58, 59}, versions(t, db, "order", "o-1"))

		var delivered int64
		require.NoError(t, db.Pool.QueryRow(t.Context(),
			`SELECT delivered_version FROM outbox_aggregates WHERE aggregate_id = 'o-1'`).Scan(&delivered))
		require.Equal(t, int64(56), delivered, "the relay starts after the versions before the first event")
	})
}

func TestDuplicateID(t *testing.T) {
	t.Parallel()

	t.Run("across transactions", func(t *testing.T) {
		t.Parallel()
		db, w := setup(t)
		id := uuid.New()
		ev := event("order", "o-1")
		ev.ID = id
		commit(t, db, w, ev)

		err := writeErr(t, db, w, ev)
		require.ErrorIs(t, err, outbox.ErrDuplicateID)
		require.Contains(t, err.Error(), id.String())

		// Same id under another aggregate: still the same event identity.
		other := event("invoice", "i-1")
		other.ID = id
		err = writeErr(t, db, w, other)
		require.ErrorIs(t, err, outbox.ErrDuplicateID)
		require.Equal(t, []int64{1}, versions(t, db, "order", "o-1"))
		require.Empty(t, versions(t, db, "invoice", "i-1"))
	})

	t.Run("twice in one batch", func(t *testing.T) {
		t.Parallel()
		db, w := setup(t)
		id := uuid.New()
		a, b := event("order", "o-1"), event("order", "o-2")
		a.ID, b.ID = id, id
		err := writeErr(t, db, w, a, event("order", "o-1"), b)
		require.ErrorIs(t, err, outbox.ErrDuplicateID)
		require.Contains(t, err.Error(), id.String())
		require.Empty(t, versions(t, db, "order", "o-1"))

		// Caught before the database.
		nodb := &noDB{}
		_, err = w.WriteBatch(t.Context(), nodb, []outbox.Event{a, b})
		require.ErrorIs(t, err, outbox.ErrDuplicateID)
		require.Zero(t, nodb.calls)
	})
}

// Writers of one aggregate queue on its counter row: whatever commits gets
// 1..N without duplicates or gaps, whatever rolls back gives its version back.
func TestConcurrentWritersOfOneAggregate(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := t.Context()

	const (
		writers   = 8
		perWriter = 25
	)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		committed []int64
		errs      = make([]error, writers)
	)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = func() error {
				for j := range perWriter {
					tx, err := db.Pool.Begin(ctx)
					if err != nil {
						return err
					}
					got, err := w.Write(ctx, tx, event("order", "hot"))
					if err != nil {
						_ = tx.Rollback(ctx)
						return fmt.Errorf("writer %d, tx %d: %w", g, j, err)
					}
					if j%5 == 4 {
						if err := tx.Rollback(ctx); err != nil {
							return err
						}
						continue
					}
					if err := tx.Commit(ctx); err != nil {
						return fmt.Errorf("writer %d, tx %d: commit: %w", g, j, err)
					}
					mu.Lock()
					committed = append(committed, got.AggregateVersion)
					mu.Unlock()
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	const n = writers * (perWriter - perWriter/5)
	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i + 1)
	}
	slices.Sort(committed)
	require.Equal(t, want, committed, "versions Write reported for committed transactions")
	require.Equal(t, want, versions(t, db, "order", "hot"), "versions stored")

	var last int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT last_version FROM outbox_aggregates WHERE aggregate_id = 'hot'`).Scan(&last))
	require.Equal(t, int64(n), last)
}

// The schema is the contract for producers in any language: a plain INSERT
// gets an id and the next version from the database.
func TestPlainSQLInsertInterleaves(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := t.Context()

	plain := func(q queryRower) (uuid.UUID, int64) {
		t.Helper()
		var id uuid.UUID
		var v int64
		require.NoError(t, q.QueryRow(ctx, `
			INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', 'o-1', 'sql', '{"from":"sql"}')
			RETURNING id, aggregate_version`).Scan(&id, &v))
		require.NotEqual(t, uuid.Nil, id)
		return id, v
	}

	require.Equal(t, int64(1), commit(t, db, w, event("order", "o-1"))[0].AggregateVersion)
	id, v := plain(db.Pool)
	require.Equal(t, int64(2), v)
	require.Equal(t, int64(3), commit(t, db, w, event("order", "o-1"))[0].AggregateVersion)

	// Both kinds of insert in one transaction.
	tx := begin(t, db)
	_, v4 := plain(tx)
	got, err := w.Write(ctx, tx, event("order", "o-1"))
	require.NoError(t, err)
	_, v6 := plain(tx)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, []int64{4, 5, 6}, []int64{v4, got.AggregateVersion, v6})

	require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, versions(t, db, "order", "o-1"))
	r := readRow(t, db, id)
	require.Equal(t, "sql", r.EventType)
	require.Equal(t, 1, r.SchemaVersion)
	require.Equal(t, "pending", r.Status)
	require.JSONEq(t, `{"from":"sql"}`, r.Payload)

	// A plain insert of a taken version fails with the constraint Write translates.
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES ('order', 'o-1', 3, 'sql', '{}')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.Equal(t, "outbox_events_aggregate_version_key", pgErr.ConstraintName)
}

// queryRower is what the plain-SQL helper needs: a pool or a transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func TestTraceContext(t *testing.T) {
	t.Parallel()
	db, w := setup(t)

	traceID, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	require.NoError(t, err)
	spanID, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	require.NoError(t, err)
	state, err := trace.ParseTraceState("ferry=t61rcWkgMzE")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    traceID,
		SpanID:     spanID,
		TraceFlags: trace.FlagsSampled,
		TraceState: state,
	})
	ctx := trace.ContextWithSpanContext(t.Context(), sc)

	tx := begin(t, db)
	traced, err := w.WriteBatch(ctx, tx, []outbox.Event{event("order", "o-1"), event("order", "o-2")})
	require.NoError(t, err)
	untraced, err := w.Write(t.Context(), tx, event("order", "o-3"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	for _, wr := range traced {
		r := readRow(t, db, wr.ID)
		require.NotNil(t, r.TraceParent)
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", *r.TraceParent)
		require.NotNil(t, r.TraceState)
		require.Equal(t, "ferry=t61rcWkgMzE", *r.TraceState)
	}
	r := readRow(t, db, untraced.ID)
	require.Nil(t, r.TraceParent)
	require.Nil(t, r.TraceState)
}

// The notify trigger fires once per committing statement. The channel and
// the advisory lock that coalesces notifications (migration 0004) are
// shared by every schema of a database: another test's producer holding the
// lock would make this one skip its NOTIFY, so the test has a database of
// its own. Only notifications sent by the writer's backend count.
func TestNotifyOnCommit(t *testing.T) {
	t.Parallel()
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	db := ferrytest.NewOwnDB(t, "")
	ctx := t.Context()

	listener, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	_, err = listener.Exec(ctx, "LISTEN ferry_outbox")
	require.NoError(t, err)

	writer, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer writer.Release()
	pid := writer.Conn().PgConn().PID()

	// next waits up to timeout for a notification from the writer's backend.
	next := func(timeout time.Duration) (*pgconn.Notification, bool) {
		t.Helper()
		waitCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		for {
			n, err := listener.WaitForNotification(waitCtx)
			if err != nil {
				require.ErrorIs(t, err, context.DeadlineExceeded)
				return nil, false
			}
			if n.PID == pid {
				return n, true
			}
		}
	}
	const quiet = 300 * time.Millisecond

	// Rolled back: nothing.
	// Each transaction is rolled back by a defer, before writer.Release,
	// should a require fail while it is open.
	tx, err := writer.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = w.Write(ctx, tx, event("order", "o-1"))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, ok := next(quiet)
	require.False(t, ok, "a rolled-back insert must not notify")

	// Committed batch: exactly one notification.
	tx2, err := writer.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx2.Rollback(ctx) }()
	_, err = w.WriteBatch(ctx, tx2, []outbox.Event{event("order", "o-1"), event("order", "o-2"), event("order", "o-1")})
	require.NoError(t, err)
	require.NoError(t, tx2.Commit(ctx))
	n, ok := next(10 * time.Second)
	require.True(t, ok, "no notification after a committed insert")
	require.Equal(t, "ferry_outbox", n.Channel)
	require.Empty(t, n.Payload)
	_, ok = next(quiet)
	require.False(t, ok, "a batch insert notifies once")
}

// An escaped backslash before "u0000" is text, not a NUL: jsonb stores it.
func TestEscapedBackslashBeforeU0000IsAccepted(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	payload := []byte(`{"path":"C:\\u0000dir"}`)
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := w.Write(ctx, tx, outbox.Event{AggregateType: "doc", AggregateID: "1", EventType: "saved", Payload: payload})
		return err
	}))
	var got string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT payload->>'path' FROM outbox_events`).Scan(&got))
	require.Equal(t, `C:\u0000dir`, got)
}
