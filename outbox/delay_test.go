package outbox_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/relaydb"
)

// timing is what the schema made of a row's delay: when it becomes
// claimable (next_attempt_at) and deliver_after as stored, each relative to
// the database's now() at the read, in whole seconds (rounded down; NULL
// reads as a very negative number).
type timing struct{ claimable, after int }

func timingOf(t *testing.T, db *ferrytest.DB, id uuid.UUID) timing {
	t.Helper()
	var tm timing
	require.NoError(t, db.Pool.QueryRow(t.Context(), `
		SELECT floor(extract(epoch FROM next_attempt_at - now()))::int,
		       coalesce(floor(extract(epoch FROM deliver_after - now()))::int, -1000000)
		FROM outbox_events WHERE id = $1`, id).Scan(&tm.claimable, &tm.after))
	return tm
}

func delayed(aggType, aggID string, d time.Duration) outbox.Event {
	e := event(aggType, aggID)
	e.DeliverAfter = time.Now().Add(d)
	return e
}

// A delayed event is claimable at its time, not before; the aggregate's
// later versions, written while it waits, wait for the same time (or their
// own, when later) and say so in deliver_after; another aggregate waits for
// nothing; a past time and the zero time mean at once.
func TestDeliverAfterHoldsTheAggregate(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	hour := time.Hour

	v1 := commit(t, db, w, delayed("order", "a", hour))[0]
	v2 := commit(t, db, w, event("order", "a"))[0]
	v3 := commit(t, db, w, delayed("order", "a", 2*hour))[0]
	v4 := commit(t, db, w, delayed("order", "a", -hour))[0]
	other := commit(t, db, w, event("order", "b"))[0]
	past := commit(t, db, w, delayed("order", "c", -hour))[0]

	require.Equal(t, []int64{1, 2, 3, 4}, []int64{v1.AggregateVersion, v2.AggregateVersion, v3.AggregateVersion, v4.AggregateVersion})
	require.Equal(t, timing{3599, 3599}, timingOf(t, db, v1.ID), "v1 waits for its own time")
	require.Equal(t, timing{3599, 3599}, timingOf(t, db, v2.ID), "v2, without a delay of its own, waits for v1")
	require.Equal(t, timing{7199, 7199}, timingOf(t, db, v3.ID), "v3 waits for its own, later time")
	require.Equal(t, timing{7199, 7199}, timingOf(t, db, v4.ID), "v4's past time is raised to v3's")
	require.Equal(t, -1, timingOf(t, db, other.ID).claimable, "another aggregate is claimable at once")
	require.Equal(t, -1000000, timingOf(t, db, other.ID).after, "and has no deliver_after")
	tp := timingOf(t, db, past.ID)
	require.Equal(t, -1, tp.claimable, "a past time is at once")
	require.Equal(t, -3601, tp.after, "and stays as the producer wrote it (an hour and a moment ago)")
}

// Once the delayed event's time has passed, a later version is not held:
// the hold lives only as long as the time is ahead.
func TestLaterVersionAfterTheTimeIsNotHeld(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	v1 := commit(t, db, w, delayed("order", "a", 1500*time.Millisecond))[0]
	require.Equal(t, 1, timingOf(t, db, v1.ID).claimable)
	deadline := time.Now().Add(10 * time.Second)
	for timingOf(t, db, v1.ID).claimable >= 0 {
		require.True(t, time.Now().Before(deadline), "v1's time never passed")
		time.Sleep(50 * time.Millisecond)
	}
	v2 := commit(t, db, w, event("order", "a"))[0]
	require.Equal(t, timing{-1, -1000000}, timingOf(t, db, v2.ID), "v2 is claimable at once")
	var hold *time.Time
	require.NoError(t, db.Pool.QueryRow(t.Context(),
		`SELECT hold_until FROM outbox_aggregates WHERE aggregate_type = 'order' AND aggregate_id = 'a'`).Scan(&hold))
	require.Nil(t, hold, "a past hold is cleared by the next version's upsert")
}

// A rolled-back delayed event takes its hold back with its version.
func TestRolledBackDelayReleasesTheHold(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	commit(t, db, w, event("order", "a"))
	tx := begin(t, db)
	_, err := w.Write(t.Context(), tx, delayed("order", "a", time.Hour))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(t.Context()))
	v2 := commit(t, db, w, event("order", "a"))[0]
	require.Equal(t, int64(2), v2.AggregateVersion)
	require.Equal(t, timing{-1, -1000000}, timingOf(t, db, v2.ID))
}

// Explicit versions (the producer's own optimistic-concurrency column)
// take the same hold, through the checked path of the trigger.
func TestExplicitVersionsAreHeldToo(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	e1 := delayed("order", "a", time.Hour)
	e1.AggregateVersion = 1
	e2 := event("order", "a")
	e2.AggregateVersion = 2
	out := commit(t, db, w, e1, e2)
	require.Equal(t, timing{3599, 3599}, timingOf(t, db, out[1].ID), "explicit v2 waits for v1")
	// And the automatic path after an explicit one sees its hold.
	v3 := commit(t, db, w, event("order", "a"))[0]
	require.Equal(t, timing{3599, 3599}, timingOf(t, db, v3.ID))
}

// Plain SQL sets deliver_after as a column; the trigger does the rest.
// 'infinity' is refused by a named constraint, which Write translates.
func TestDeliverAfterFromPlainSQL(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := t.Context()
	var id1, id2 uuid.UUID
	require.NoError(t, db.Pool.QueryRow(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, deliver_after)
		VALUES ('order', 'sql', 'created', '{}', now() + interval '10 minutes') RETURNING id`).Scan(&id1))
	require.NoError(t, db.Pool.QueryRow(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', 'sql', 'changed', '{}') RETURNING id`).Scan(&id2))
	require.Equal(t, timing{599, 599}, timingOf(t, db, id1))
	require.Equal(t, timing{599, 599}, timingOf(t, db, id2), "the plain-SQL v2 waits for v1")
	// Go after plain SQL: the same hold.
	v3 := commit(t, db, w, event("order", "sql"))[0]
	require.Equal(t, timing{599, 599}, timingOf(t, db, v3.ID))

	_, err := db.Pool.Exec(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, deliver_after)
		VALUES ('order', 'inf', 'created', '{}', 'infinity')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "outbox_events_deliver_after_finite", pgErr.ConstraintName)
	require.Zero(t, len(versions(t, db, "order", "inf")), "nothing of it stayed")
}

// Validate refuses a time beyond Config.MaxDelay, naming the field, before
// anything reaches the database; any past time is fine.
func TestDeliverAfterValidation(t *testing.T) {
	t.Parallel()
	w, err := outbox.NewWriter(outbox.Config{MaxDelay: time.Hour})
	require.NoError(t, err)
	for _, tt := range []struct {
		name string
		at   time.Time
		bad  bool
	}{
		{"zero", time.Time{}, false},
		{"long past", time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"within MaxDelay", time.Now().Add(59 * time.Minute), false},
		{"beyond MaxDelay", time.Now().Add(61 * time.Minute), true},
		{"year 9999", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ev := event("order", "a")
			ev.DeliverAfter = tt.at
			err := w.Validate(ev)
			if !tt.bad {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
			require.ErrorContains(t, err, "DeliverAfter")
			require.ErrorContains(t, err, "Config.MaxDelay")
			d := &noDB{}
			_, err = w.Write(t.Context(), d, ev)
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
			require.Zero(t, d.calls)
		})
	}
	_, err = outbox.NewWriter(outbox.Config{MaxDelay: -time.Second})
	require.ErrorContains(t, err, "Config.MaxDelay")

	// The default allows 30 days, not more.
	def, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	ev := event("order", "a")
	ev.DeliverAfter = time.Now().Add(29 * 24 * time.Hour)
	require.NoError(t, def.Validate(ev))
	ev.DeliverAfter = time.Now().Add(31 * 24 * time.Hour)
	require.ErrorContains(t, def.Validate(ev), "DeliverAfter")
}

// A long-past DeliverAfter is stored as NULL (at once), clear of
// PostgreSQL's range of timestamps.
func TestLongPastDeliverAfterIsStoredAsNull(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ev := event("order", "a")
	ev.DeliverAfter = time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC)
	out := commit(t, db, w, ev)[0]
	require.Equal(t, timing{-1, -1000000}, timingOf(t, db, out.ID))
}

// The backlog counts rows that wait for their time as delayed, not as
// pending, with no age and the time until the first is due; a delayed row
// whose time has come counts as pending from its deliver_after.
func TestBacklogCountsDelayedRowsApart(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	commit(t, db, w, delayed("order", "a", time.Hour))
	commit(t, db, w, event("order", "a")) // held behind it
	commit(t, db, w, delayed("order", "b", 2*time.Hour))
	commit(t, db, w, event("order", "c"))
	// A row created ten minutes ago, due two minutes ago: late by two
	// minutes, not ten.
	_, err := db.Pool.Exec(t.Context(), `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
		VALUES ('invoice', 'd', 'created', '{}', now() - interval '10 minutes')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(t.Context(), `UPDATE outbox_events SET deliver_after = now() - interval '2 minutes' WHERE aggregate_type = 'invoice'`)
	require.NoError(t, err)

	backlog, err := relaydb.ReadBacklog(t.Context(), db.Pool)
	require.NoError(t, err)
	got := map[string]relaydb.Backlog{}
	for _, b := range backlog {
		got[b.AggregateType+"/"+b.Status] = b
	}
	require.Len(t, got, 3, "%+v", backlog)
	d := got["order/delayed"]
	require.Equal(t, int64(3), d.Count)
	require.Zero(t, d.OldestAge, "a delayed row is not late")
	require.InDelta(t, time.Hour.Seconds(), d.NextDue.Seconds(), 5, "the first is due in an hour")
	require.Equal(t, int64(1), got["order/pending"].Count)
	inv := got["invoice/pending"]
	require.InDelta(t, (2 * time.Minute).Seconds(), inv.OldestAge.Seconds(), 5, "late since its deliver_after")
}

// A publish reads when the row became deliverable, so the commit-to-publish
// latency of a delayed event counts from its time, not from its commit.
func TestPublishRowDueAtIsTheLaterOfCommitAndDeliverAfter(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := t.Context()
	d := commit(t, db, w, delayed("order", "a", time.Hour))[0]
	n := commit(t, db, w, event("order", "b"))[0]
	rd, err := relaydb.LoadForPublish(ctx, db.Pool, d.ID.String())
	require.NoError(t, err)
	require.WithinDuration(t, rd.CreatedAt.Add(time.Hour), rd.DueAt, 5*time.Second, "the delayed row is due in an hour")
	rn, err := relaydb.LoadForPublish(ctx, db.Pool, n.ID.String())
	require.NoError(t, err)
	require.Equal(t, rn.CreatedAt, rn.DueAt, "a row without a delay is due at its commit")
	many, err := relaydb.LoadManyForPublish(ctx, db.Pool, []string{d.ID.String()})
	require.NoError(t, err)
	require.Equal(t, rd.DueAt, many[d.ID.String()].DueAt)
}
