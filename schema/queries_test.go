package schema_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/internal/testenv"
	"github.com/ferry-outbox/ferry/schema"
)

// Undelivered must never read the whole table: delivered rows are its bulk.
// With sequential scans priced out, each status must still be reachable
// through an index; without one the planner falls back to a sequential
// scan anyway, and this fails.
func TestUndeliveredReadsOnlyThroughPartialIndexes(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status)
		SELECT 'order', g::text, 'x', '{}', (ARRAY['pending', 'dispatched', 'quarantined', 'published', 'skipped'])[g % 5 + 1]
		FROM generate_series(1, 50) g`)
	require.NoError(t, err)

	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `EXPLAIN SELECT status, count(*) FROM (`+schema.Undelivered+`) u GROUP BY status`)
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

	rows, err := db.Pool.Query(ctx, `SELECT status, count(*)::int FROM (`+schema.Undelivered+`) u GROUP BY status`)
	require.NoError(t, err)
	n := map[string]int{}
	for rows.Next() {
		var s string
		var c int
		require.NoError(t, rows.Scan(&s, &c))
		n[s] = c
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"pending": 10, "dispatched": 10, "quarantined": 10}, n, "published and skipped rows are delivered")
}
