package relaydb_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/relaydb"
)

// The backlog must never read the whole table: delivered rows are its bulk.
// With sequential scans priced out, each status must still be reachable
// through an index; without one the planner falls back to a sequential
// scan anyway, and this fails.
func TestUndeliveredReadsOnlyThroughPartialIndexes(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status)
		SELECT (ARRAY['order', 'invoice'])[g % 2 + 1], g::text, 'x', '{}', (ARRAY['pending', 'dispatched', 'quarantined', 'published', 'skipped'])[g % 5 + 1]
		FROM generate_series(1, 50) g`)
	require.NoError(t, err)

	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `EXPLAIN SELECT status, count(*) FROM (`+relaydb.SQLUndelivered+`) u GROUP BY status`)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		plan := strings.Join(lines, "\n")
		require.NotContains(t, plan, "Seq Scan", plan)
		for _, idx := range []string{"outbox_events_pending_idx", "outbox_events_dispatched_idx", "outbox_events_quarantined_idx"} {
			require.Contains(t, plan, idx, plan)
		}
		return nil
	})
	require.NoError(t, err)

	backlog, err := relaydb.ReadBacklog(ctx, db.Pool)
	require.NoError(t, err)
	n := map[string]int64{}
	for _, b := range backlog {
		require.Positive(t, b.OldestAge)
		n[b.AggregateType+"/"+b.Status] = b.Count
	}
	require.Equal(t, map[string]int64{
		"invoice/pending": 5, "invoice/dispatched": 5, "invoice/quarantined": 5,
		"order/pending": 5, "order/dispatched": 5, "order/quarantined": 5,
	}, n, "published and skipped rows are delivered")

	size, err := relaydb.TableBytes(ctx, db.Pool)
	require.NoError(t, err)
	require.Positive(t, size)
}

// The reads by id and by status return the rows they name, and say
// ErrEventNotFound for ids without a row or ids that are not UUIDs.
func TestReadsByIDAndStatus(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	var ids []string
	rows, err := db.Pool.Query(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, last_error, last_error_class)
		SELECT 'order', 'a', 'e' || g, jsonb_build_object('n', g), (ARRAY['published', 'published', 'quarantined'])[g],
		       CASE WHEN g = 3 THEN 'quarantined (X): no' END, CASE WHEN g = 3 THEN 'X' END
		FROM generate_series(1, 3) g RETURNING id::text`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, ids, 3)

	q, err := relaydb.Quarantined(ctx, db.Pool, 0)
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, relaydb.Row{ID: ids[2], AggregateType: "order", AggregateID: "a", Version: 3, EventType: "e3", Status: "quarantined",
		LastError: "quarantined (X): no", LastErrorClass: "X", CreatedAt: q[0].CreatedAt, Payload: q[0].Payload}, q[0])
	require.JSONEq(t, `{"n": 3}`, *q[0].Payload)

	byID, err := relaydb.RowsByID(ctx, db.Pool, []string{ids[0], ids[2], "00000000-0000-0000-0000-000000000000"})
	require.NoError(t, err)
	require.Len(t, byID, 2)
	require.Equal(t, int64(1), byID[ids[0]].Version)
	require.Empty(t, byID[ids[0]].LastError)

	one, err := relaydb.RowByID(ctx, db.Pool, strings.ToUpper(ids[1]))
	require.NoError(t, err)
	require.Equal(t, "published", one.Status)
	for _, id := range []string{"00000000-0000-0000-0000-000000000000", "not-a-uuid"} {
		_, err = relaydb.RowByID(ctx, db.Pool, id)
		require.ErrorIs(t, err, relaydb.ErrEventNotFound, id)
		_, err = relaydb.Payload(ctx, db.Pool, id)
		require.ErrorIs(t, err, relaydb.ErrEventNotFound, id)
	}

	p, err := relaydb.Payload(ctx, db.Pool, ids[1])
	require.NoError(t, err)
	require.JSONEq(t, `{"n": 2}`, string(p))

	pub, err := relaydb.PublishedIDs(ctx, db.Pool, "order", "a", 1, 3)
	require.NoError(t, err)
	require.Equal(t, ids[:2], pub, "the quarantined v3 is not published")
	minute, hour, err := relaydb.PublishedRecently(ctx, db.Pool)
	require.NoError(t, err)
	require.Zero(t, minute+hour, "published_at is not set by this insert")
}

// The table's health comes from PostgreSQL's statistics and catalogs: dead
// row versions appear after updates, every index of the table is listed
// with its size.
func TestReadTableHealth(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'x', '{}' FROM generate_series(1, 40) g`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE outbox_events SET status = 'published', published_at = now()`)
	require.NoError(t, err)
	var h relaydb.TableHealth
	// The statistics are flushed shortly after each transaction ends.
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err = relaydb.ReadTableHealth(ctx, db.Pool)
		require.NoError(t, err)
		if h.DeadRows >= 40 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.GreaterOrEqual(t, h.DeadRows, int64(40), "one dead version per updated row, until vacuum")
	require.Equal(t, int64(40), h.LiveRows)
	for _, idx := range []string{"outbox_events_pkey", "outbox_events_aggregate_version_key", "outbox_events_pending_idx",
		"outbox_events_dispatched_idx", "outbox_events_quarantined_idx"} {
		require.Positive(t, h.IndexBytes[idx], "index %s in %v", idx, h.IndexBytes)
	}
}

// A retention run's record: until a run finishes, the last success is the
// record's start and nothing is counted; the count reads rows past the age
// only; a finished run sets the success and zero overdue.
func TestRetentionRecord(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	r, err := relaydb.ReadRetention(ctx, db.Pool)
	require.NoError(t, err)
	require.False(t, r.Succeeded)
	require.Nil(t, r.Overdue, "no run counted yet")
	require.WithinDuration(t, time.Now(), r.LastSuccess, time.Minute, "the record began with the schema")

	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, published_at)
		SELECT 'order', g::text, 'x', '{}', s, now() - interval '3 hours', CASE WHEN s = 'published' THEN now() - interval '2 hours' END
		FROM generate_series(1, 12) g, (VALUES ('published'), ('skipped'), ('pending'), ('quarantined')) v(s)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, published_at)
		SELECT 'order', 'recent-' || g, 'x', '{}', 'published', now() FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	n, err := relaydb.CountOverdue(ctx, db.Pool, time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(24), n, "published an hour past, and skipped (by created_at); never pending or quarantined")
	r, err = relaydb.ReadRetention(ctx, db.Pool)
	require.NoError(t, err)
	require.NotNil(t, r.Overdue)
	require.Equal(t, int64(24), *r.Overdue)
	require.False(t, r.Succeeded)

	before := r.LastSuccess
	require.NoError(t, relaydb.RetentionSucceeded(ctx, db.Pool))
	r, err = relaydb.ReadRetention(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, r.Succeeded)
	require.True(t, r.LastSuccess.After(before))
	require.Equal(t, int64(0), *r.Overdue)
}
