package outbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/relaydb"
)

// Table sizes of BenchmarkTwoMillionRows.
const (
	scaleRows = 2_000_000
	// scaleOld rows are past retention (published 40 days ago, the first
	// ones in the heap, as on a table that has been running): what the
	// retention steps delete and blank.
	scaleOld = 400_000
	// scaleInFlight rows are not delivered yet: 200 pending, 100
	// dispatched.
	scaleInFlight = 300
)

// sqlScaleLoad fills the table in one statement: the triggers are off
// (the version trigger's upsert per row would take most of the time and
// matters to none of the reads measured), versions are given, one
// aggregate per 10 rows, and payloads of about 200 bytes. The delivered
// rows are spread over the last 29 days, older ones first, as on a table
// that has been running with --payload-retention 7d: the payloads of rows
// older than 8 days are blanked already (JSON null), those of the day
// before the 7 days are next.
const sqlScaleLoad = `
INSERT INTO outbox_events (aggregate_type, aggregate_id, aggregate_version, event_type, payload, status,
                           attempts, claimed_by, created_at, dispatched_at, published_at, next_attempt_at)
SELECT 'order', 'o-' || (g / 10), g % 10 + 1, 'created',
       CASE WHEN t < now() - interval '8 days' THEN 'null'::jsonb
            ELSE jsonb_build_object('order_id', md5(g::text), 'customer', 'customer-' || (g % 20), 'total_cents', g % 20000,
                                    'email', 'customer-' || (g % 20) || '@example.com', 'note', repeat('x', 60)) END,
       'published', 1, 'poller-0', t, t, t, t
FROM (SELECT g, CASE WHEN g < $2 THEN now() - interval '40 days'
                     ELSE now() - interval '29 days' * (1 - (g - $2)::float8 / ($1 - $2)) END AS t
      FROM generate_series(0, $1 - 1) g) s`

// sqlScaleInFlight adds the rows in flight, the newest.
const sqlScaleInFlight = `
INSERT INTO outbox_events (aggregate_type, aggregate_id, aggregate_version, event_type, payload, status, attempts, dispatched_at)
SELECT 'order', 'new-' || g, 1, 'created', '{"order_id": "new"}', CASE WHEN g % 3 = 0 THEN 'dispatched' ELSE 'pending' END, 1,
       CASE WHEN g % 3 = 0 THEN now() END
FROM generate_series(1, $1) g`

// sqlScaleFullRead is what the backlog read would cost without the
// statuses' partial indexes: a count by type and status over every row.
const sqlScaleFullRead = `SELECT aggregate_type, status, count(*) FROM outbox_events GROUP BY 1, 2`

// BenchmarkTwoMillionRows builds an outbox of 2 million rows (1.6 million
// after the retention steps) and times, on it, what docs/operating.md
// gives figures for: the /metrics backlog scrape (ReadBacklog, through the
// partial indexes) against a full count, `ferry status`'s throughput line
// (PublishedRecently, which scans the published rows), and a retention
// batch of 1000 rows: blanking payloads, then deleting. It is not part of
// `make test`; run it alone (minutes; about 1 GB in the test database while
// it runs):
//
//	go test -run '^$' -bench TwoMillionRows -v ./outbox/
//
// The reads are sub-benchmarks (ns/op); the retention steps change the
// table, so they run once, and their log lines give the first, median,
// last and slowest batch.
func BenchmarkTwoMillionRows(b *testing.B) {
	db := ferrytest.NewDB(b, "")
	ctx := context.Background()
	start := time.Now()
	for _, step := range []struct {
		sql  string
		args []any
	}{
		{`ALTER TABLE outbox_events DISABLE TRIGGER USER`, nil},
		{sqlScaleLoad, []any{scaleRows - scaleInFlight, scaleOld}},
		{sqlScaleInFlight, []any{scaleInFlight}},
		{`ALTER TABLE outbox_events ENABLE TRIGGER USER`, nil},
		{`VACUUM ANALYZE outbox_events`, nil},
	} {
		_, err := db.Pool.Exec(ctx, step.sql, step.args...)
		require.NoError(b, err, step.sql)
	}
	size, err := relaydb.TableBytes(ctx, db.Pool)
	require.NoError(b, err)
	b.Logf("%d rows (%d past retention, %d in flight), %d MB with indexes and TOAST, built in %s",
		scaleRows, scaleOld, scaleInFlight, size>>20, time.Since(start).Round(time.Second))

	b.Run("scrape backlog", func(b *testing.B) {
		for b.Loop() {
			rows, err := relaydb.ReadBacklog(ctx, db.Pool)
			require.NoError(b, err)
			require.Len(b, rows, 2, "pending and dispatched")
		}
	})
	b.Run("full count by status", func(b *testing.B) {
		for b.Loop() {
			_, err := db.Pool.Exec(ctx, sqlScaleFullRead)
			require.NoError(b, err)
		}
	})
	b.Run("status throughput", func(b *testing.B) {
		for b.Loop() {
			_, hour, err := relaydb.PublishedRecently(ctx, db.Pool)
			require.NoError(b, err)
			require.Positive(b, hour)
		}
	})
	// The retention steps, in the retention run's order and batches of
	// 1000: the delete of every row past retention, then 20 batches of
	// payload blanking (of the 55,000 rows between 7 and 8 days old). They
	// change the table, so each runs once, here, after the reads.
	retention, payloadRetention := 30*24*time.Hour, 7*24*time.Hour
	batches := func(what string, limit int, step func() (int64, error)) {
		var took []time.Duration
		var done int64
		for len(took) < limit {
			t0 := time.Now()
			n, err := step()
			require.NoError(b, err, what)
			if n == 0 {
				break
			}
			took, done = append(took, time.Since(t0)), done+n
		}
		require.NotEmpty(b, took, what)
		ms := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
		first, last := took[0], took[len(took)-1]
		slices.Sort(took)
		b.Logf("%s: %d rows in %d batches of 1000; first %s, median %s, last %s, slowest %s",
			what, done, len(took), ms(first), ms(took[len(took)/2]), ms(last), ms(took[len(took)-1]))
	}
	batches("retention, delete", scaleOld/1000+1, func() (int64, error) { return relaydb.DeleteDelivered(ctx, db.Pool, retention, 1000) })
	batches("retention, payload blanking", 20, func() (int64, error) {
		return relaydb.PurgePayloads(ctx, db.Pool, payloadRetention, 1000)
	})
	var left int64
	require.NoError(b, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&left))
	require.Equal(b, int64(scaleRows-scaleOld), left, "every row past retention deleted, no other")
}
