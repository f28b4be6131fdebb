package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
)

// Temporal unreachable for the poller: rows stay pending (with the failure
// recorded and attempts counted) and flow once Temporal is back.
func TestTemporalOutageKeepsRows(t *testing.T) {
	t.Parallel()
	e := setup(t)
	proxy := servers.NewProxy(t, temporalAddr)
	pc, err := client.Dial(client.Options{HostPort: proxy.Addr(), Namespace: namespace, Logger: ferrytest.QuietLogger()})
	require.NoError(t, err)
	t.Cleanup(pc.Close)
	e.startFerry(t, ferryOpts{temporal: pc})

	proxy.Pause()
	ids := e.commitN(t, 12, 4)
	waitFor(t, 30*time.Second, "a failed signal recorded on the rows", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'pending' AND attempts > 0 AND last_error LIKE '%signal-with-start%'`) > 0
	})
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE status <> 'pending'`), "nothing leaves pending while Temporal is away")
	proxy.Resume()

	msgs := e.br.Collect(t, 12, 90*time.Second)
	l := newLedger()
	for _, m := range msgs {
		require.True(t, ids[m.MessageId])
		l.add(parse(t, m))
	}
	require.Equal(t, 12, l.unique())
	l.requireInOrder(t)
}

// PostgreSQL unreachable for Ferry (its pool and LISTEN connection go
// through a proxy that is paused; producers keep committing directly):
// Ferry backs off, reconnects, and delivers everything.
func TestPostgresOutageLosesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	proxy := servers.NewProxy(t, "127.0.0.1:5432")
	url := ferrytest.WithSearchPath("postgres://postgres@"+proxy.Addr()+"/test", e.db.Schema)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e.startFerry(t, ferryOpts{pool: pool})

	e.warmUp(t)

	proxy.Pause()
	ids := e.commitN(t, 12, 4)
	time.Sleep(2 * time.Second) // an outage of a few poll intervals and retries
	require.Equal(t, 12, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'pending'`))
	proxy.Resume()

	l := newLedger()
	deadline := time.Now().Add(90 * time.Second)
	for l.unique() < 12 && time.Now().Before(deadline) {
		if d, ok := e.br.Get(t, time.Second); ok {
			require.True(t, ids[d.MessageId])
			l.add(parse(t, d))
		}
	}
	require.Equal(t, 12, l.unique())
	l.requireInOrder(t)
}
