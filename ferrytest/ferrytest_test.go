package ferrytest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/outbox"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a testingT that keeps the failure instead of stopping.
type recorder struct {
	msg    string
	failed bool
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.msg += fmt.Sprintf(format, args...)
}
func (r *recorder) FailNow() { r.failed = true }

// fails runs an assertion on a recorder and returns its message, failing
// the test when the assertion passed.
func fails(t *testing.T, assert func(t testingT)) string {
	t.Helper()
	r := &recorder{}
	assert(r)
	require.True(t, r.failed, "the assertion passed")
	require.Contains(t, r.msg, "ferrytest: ")
	return r.msg
}

func writer(t *testing.T) *outbox.Writer {
	t.Helper()
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	return w
}

// begin starts a transaction rolled back at the end of the test unless
// committed.
func begin(t *testing.T, db *DB) pgx.Tx {
	t.Helper()
	tx, err := db.Pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// A transaction's events are seen through the transaction before the
// commit, and through the pool only after it.
func TestRequireWrittenSeesTheTransaction(t *testing.T) {
	t.Parallel()
	db := NewDB(t, "")
	ctx := t.Context()
	tx := begin(t, db)
	got, err := writer(t).WriteBatch(ctx, tx, []outbox.Event{
		{AggregateType: "order", AggregateID: "o-1", EventType: "created", Payload: []byte(`{"total_cents": 4200, "lines": [1, 2]}`),
			Headers: map[string]string{"tenant": "acme"}},
		{AggregateType: "order", AggregateID: "o-1", EventType: "paid", Payload: []byte(`{}`)},
	})
	require.NoError(t, err)

	e := RequireWritten(ctx, t, tx, Expected{AggregateType: "order", AggregateID: "o-1", EventType: "created",
		Payload: map[string]any{"lines": []int{1, 2}, "total_cents": 4200}, SchemaVersion: 1, Headers: map[string]string{"tenant": "acme"}})
	require.Equal(t, got[0].ID, e.ID)
	require.Equal(t, int64(1), e.Version)
	require.Equal(t, "pending", e.Status)
	RequireWritten(ctx, t, tx, Expected{AggregateType: "order", EventType: "paid", Version: 2, Payload: `{}`, Headers: map[string]string{}})
	msg := fails(t, func(t testingT) {
		requireWritten(ctx, t, db.Pool, Expected{AggregateType: "order", EventType: "created"})
	})
	require.Contains(t, msg, "no event order/* created was written; written: none", "uncommitted: the pool sees nothing")

	require.NoError(t, tx.Commit(ctx))
	RequireManyWritten(ctx, t, db.Pool, []Expected{
		{AggregateType: "order", AggregateID: "o-1", EventType: "created"},
		{AggregateType: "order", AggregateID: "o-1", EventType: "paid"},
	})
	require.Len(t, Written(ctx, t, db.Pool), 2)
}

// Each failure names the event and what differed, or lists what was
// written.
func TestRequireWrittenSaysWhatDiffered(t *testing.T) {
	t.Parallel()
	db := NewDB(t, "")
	ctx := t.Context()
	tx := begin(t, db)
	_, err := writer(t).WriteBatch(ctx, tx, []outbox.Event{
		{AggregateType: "order", AggregateID: "o-1", EventType: "created", Payload: []byte(`{"total_cents": 4200}`), SchemaVersion: 2},
		{AggregateType: "order", AggregateID: "o-2", EventType: "created", Payload: []byte(`{"total_cents": 1}`), Headers: map[string]string{"a": "b"}},
		{AggregateType: "order", AggregateID: "o-1", EventType: "paid", Payload: []byte(`{}`)},
	})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	tests := []struct {
		name string
		want Expected
		msg  string
	}{
		{"payload", Expected{AggregateType: "order", AggregateID: "o-1", EventType: "created", Payload: `{"total_cents": 420}`},
			`Payload: want {"total_cents":420}, written {"total_cents":4200}`},
		{"schema version", Expected{AggregateType: "order", AggregateID: "o-1", EventType: "created", SchemaVersion: 1},
			"SchemaVersion: want 1, written 2"},
		{"headers", Expected{AggregateType: "order", AggregateID: "o-2", EventType: "created", Headers: map[string]string{}},
			`Headers: want none, written {"a":"b"}`},
		{"ambiguous", Expected{AggregateType: "order", EventType: "created"},
			"2 events order/* created were written (order/o-1 created v1, order/o-2 created v1): name one"},
		{"absent", Expected{AggregateType: "order", AggregateID: "o-1", EventType: "shipped"},
			"no event order/o-1 shipped was written; written: order/o-1 created v1, order/o-1 paid v2, order/o-2 created v1"},
		{"not JSON", Expected{AggregateType: "order", AggregateID: "o-1", EventType: "paid", Payload: `{`},
			"Payload: the expected payload is no JSON document"},
	}
	for _, tt := range tests {
		msg := fails(t, func(t testingT) { requireWritten(ctx, t, db.Pool, tt.want) })
		require.Contains(t, msg, tt.msg, tt.name)
	}

	many := []struct {
		name string
		want []Expected
		msg  string
	}{
		{"one missing", []Expected{{AggregateType: "order", AggregateID: "o-1", EventType: "created"}, {AggregateType: "order", EventType: "shipped"}},
			"expected event 2 of 2, order/* shipped, was not written"},
		{"left over", []Expected{{AggregateType: "order", AggregateID: "o-1", EventType: "created"}, {AggregateType: "order", AggregateID: "o-1", EventType: "paid"}},
			"1 events were written that were not expected: order/o-2 created v1"},
		{"out of order", []Expected{{AggregateType: "order", AggregateID: "o-1", EventType: "paid"}, {AggregateType: "order", AggregateID: "o-1", EventType: "created"}},
			"expected event 2 of 2, order/o-1 created v1, after order/o-1 paid v2, but it was written before it"},
		{"differs", []Expected{{AggregateType: "order", AggregateID: "o-2", EventType: "created", Payload: `{"total_cents": 2}`}},
			`expected event 1 of 1, order/o-2 created v1`},
	}
	for _, tt := range many {
		msg := fails(t, func(t testingT) { requireManyWritten(ctx, t, db.Pool, tt.want) })
		require.Contains(t, msg, tt.msg, tt.name)
	}
}

// An event that is not published is named with its status; an id without
// a row says so.
func TestWaitPublishedNamesWhatIsNotPublished(t *testing.T) {
	t.Parallel()
	db := NewDB(t, "")
	ctx := t.Context()
	tx := begin(t, db)
	w, err := writer(t).Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "o-1", EventType: "created", Payload: []byte(`{}`)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	missing := uuid.New()

	msg := fails(t, func(t testingT) { waitPublished(t, db.Pool, 200*time.Millisecond, []uuid.UUID{w.ID, missing}) })
	require.Contains(t, msg, "2 of 2 events not published within 200ms")
	require.Contains(t, msg, w.ID.String()+" (order/o-1 created v1): pending")
	require.Contains(t, msg, missing.String()+": no such event in outbox_events")
	require.False(t, strings.Contains(msg, "last error"), "the row has none")
}
