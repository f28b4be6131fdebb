package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/outbox"
)

// Delayed events (Event.DeliverAfter, the deliver_after column) through a
// whole Ferry: real PostgreSQL, Temporal and RabbitMQ. The assertions are
// on the database's timestamps (published_at against deliver_after), not
// on sleeps.

// writeDelayed commits one event of aggregate agg with DeliverAfter at
// (zero: none) through the Go writer and returns its id.
func (e *env) writeDelayed(t *testing.T, agg string, at time.Time) string {
	t.Helper()
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	tx, err := e.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	payload, _ := json.Marshal(map[string]string{"order": id.String()})
	_, err = e.writer.Write(ctx, tx, outbox.Event{ID: id, AggregateType: e.aggType, AggregateID: agg, EventType: "changed",
		Payload: payload, DeliverAfter: at})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return id.String()
}

// insertSQL commits one event of aggregate agg with plain SQL, delay
// seconds ahead when delay is not empty (an SQL interval).
func (e *env) insertSQL(t *testing.T, agg, delay string) string {
	t.Helper()
	var id string
	var d *string
	if delay != "" {
		d = &delay
	}
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, deliver_after)
		VALUES ($1, $2, 'changed', '{}', now() + $3::interval) RETURNING id::text`, e.aggType, agg, d).Scan(&id))
	return id
}

// delivered is one row's delivery as the database recorded it.
type delivered struct {
	after     *time.Time // deliver_after as stored (raised for a held row)
	published time.Time
	claimed   bool // by a claim pass (the stream never sets claimed_by)
}

// delayedScenario writes, from Go and from plain SQL, a delayed event,
// a later version of its aggregate held behind it, and an event of another
// aggregate; while they wait, the metrics call them delayed, not late; then
// it checks that every one was published, none before its time, in version
// order, the other aggregate without waiting. It returns what the database
// recorded, by name.
func (e *env) delayedScenario(t *testing.T) map[string]delivered {
	t.Helper()
	e.warmUp(t)
	ids := map[string]string{}
	ids["go-v1"] = e.writeDelayed(t, "go", time.Now().Add(2*time.Second))
	ids["go-v2"] = e.writeDelayed(t, "go", time.Time{})
	ids["sql-v1"] = e.insertSQL(t, "sql", "2 seconds")
	ids["sql-v2"] = e.insertSQL(t, "sql", "")
	ids["other"] = e.writeDelayed(t, "other", time.Time{})
	written := time.Now()

	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewOutboxCollector(e.db.Pool)))
	delayedLabels := map[string]string{"aggregate_type": e.aggType, "status": "delayed"}
	require.Equal(t, 4.0, ferrytest.Sample(t, reg, "ferry_outbox_events", delayedLabels), "the waiting rows count as delayed")
	require.Empty(t, ferrytest.Series(t, reg, "ferry_outbox_oldest_age_seconds", delayedLabels), "a delayed row has no age: it is not late")
	next := ferrytest.Sample(t, reg, "ferry_outbox_next_due_seconds", map[string]string{"aggregate_type": e.aggType})
	require.InDelta(t, 2, next, 1, "the first is due in about 2s")
	require.Less(t, time.Since(written), 1500*time.Millisecond, "the checks above ran before the rows were due")

	msgs := e.br.Collect(t, 5, 60*time.Second)
	require.Len(t, msgs, 5)
	l := newLedger()
	for _, m := range msgs {
		l.add(parse(t, m))
	}
	require.Zero(t, l.duplicates)
	l.requireInOrder(t)
	require.Equal(t, ids["other"], msgs[0].MessageId, "the other aggregate waited for nothing")
	for _, m := range msgs {
		if m.MessageId == ids["go-v2"] || m.MessageId == ids["sql-v2"] {
			require.Equal(t, int64(2), m.Headers[broker.HeaderAggregateVersion])
		}
	}

	got := map[string]delivered{}
	waitFor(t, 10*time.Second, "all five marked published", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE id = ANY($1::uuid[]) AND status = 'published'`, values(ids)) == 5
	})
	for name, id := range ids {
		var d delivered
		require.NoError(t, e.db.Pool.QueryRow(context.Background(),
			`SELECT deliver_after, published_at, claimed_by IS NOT NULL FROM outbox_events WHERE id = $1`, id).Scan(&d.after, &d.published, &d.claimed))
		got[name] = d
	}
	for _, name := range []string{"go-v1", "go-v2", "sql-v1", "sql-v2"} {
		d := got[name]
		require.NotNil(t, d.after, name)
		require.False(t, d.published.Before(*d.after), "%s published at %s, before its time %s", name, d.published, *d.after)
		late := d.published.Sub(*d.after)
		t.Logf("%s published %s after its time", name, late.Round(time.Millisecond))
		require.Less(t, late, 5*time.Second, "%s: late by more than a claim or two", name)
	}
	require.Equal(t, *got["go-v1"].after, *got["go-v2"].after, "v2 was held until v1's time")
	require.Equal(t, *got["sql-v1"].after, *got["sql-v2"].after, "from plain SQL too")
	require.Nil(t, got["other"].after)
	require.True(t, got["other"].published.Before(*got["go-v1"].after), "the other aggregate was published before the delayed one was due")
	return got
}

func values(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// The polling relay: a delayed event and the versions behind it are
// claimed at their time.
func TestDelayedEventsWaitForTheirTimeInOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{})
	e.delayedScenario(t)
}

// The log-tailing relay (`ferry run --source wal`): the stream leaves
// delayed rows to the catch-up pass, which runs at their time instead of
// up to its 30s interval later, and streams the rest.
func TestWALDelayedEventsWaitForTheirTimeInOrder(t *testing.T) {
	t.Parallel()
	e, _ := walEnv(t)
	e.walProcess(t, "run", "run")
	waitFor(t, time.Minute, "the replication slot streamed", func() bool {
		return e.count(t, `SELECT count(*) FROM pg_replication_slots WHERE active`) == 1
	})
	got := e.delayedScenario(t)
	for _, name := range []string{"go-v1", "go-v2", "sql-v1", "sql-v2"} {
		require.True(t, got[name].claimed, "%s came through the catch-up claim, not the stream", name)
	}
	require.False(t, got["other"].claimed, "the other aggregate's event was streamed")
}
