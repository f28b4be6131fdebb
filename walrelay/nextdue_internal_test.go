package walrelay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
)

// The next catch-up pass: at the first pending row's due time, at once for
// a delayed row that became due after the last pass claimed (else it
// would wait for the interval), and never for undelayed rows the stream
// delivers.
func TestNextPassComesAtTheDueTime(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	r := &Relay{cfg: Config{Pool: db.Pool}}
	latest := time.Now().Add(time.Hour)
	insert := func(agg, deliverAfter string) {
		_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, deliver_after)
			VALUES ('order', $1, 'changed', '{}', now() + $2::interval)`, agg, deliverAfter)
		require.NoError(t, err)
	}
	require.Equal(t, latest, r.nextPass(ctx, latest), "nothing waits")

	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'fresh', 'changed', '{}')`)
	require.NoError(t, err)
	insert("now", "0 seconds")
	require.Equal(t, latest, r.nextPass(ctx, latest), "rows due when written are the stream's")

	insert("later", "10 seconds")
	next := r.nextPass(ctx, latest)
	require.WithinDuration(t, time.Now().Add(10*time.Second), next, 2*time.Second, "at the delayed row's time")

	// A delayed row whose time passed a moment ago, still pending: the
	// pass that ran before its time did not take it.
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at, deliver_after)
		VALUES ('order', 'missed', 'changed', '{}', now() - interval '2 seconds', now() - interval '200 milliseconds')`)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), r.nextPass(ctx, latest), 500*time.Millisecond, "at once")
}
