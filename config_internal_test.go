package ferry

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/worker"
)

// A process fills its Config once: WithDefaults hands a Config it filled
// back as it is, New fills once, and ferry.Module's modules fill the
// service's Config once between them, or not at all when the service (as
// the ferry command does) supplies one it filled. A copy changed since is
// filled anew. Not parallel: it counts the fills of the whole package.
func TestWithDefaultsRunsOncePerProcess(t *testing.T) {
	// No broker: the Worker module would dial RabbitMQ as it is built.
	raw := Config{NoBroker: true, Destinations: []string{"order.created=start:fulfilment,type=Fulfilment,queue=orders"}}
	count := func(do func()) int64 {
		t.Helper()
		before := fills.Load()
		do()
		return fills.Load() - before
	}

	var cfg Config
	require.Equal(t, int64(1), count(func() {
		var err error
		cfg, err = raw.WithDefaults()
		require.NoError(t, err)
		again, err := cfg.WithDefaults()
		require.NoError(t, err)
		require.Same(t, cfg.filled, again.filled, "filled once, handed back as it is")
		router, err := cfg.DestinationRouter()
		require.NoError(t, err)
		require.Equal(t, 1, router.Len(), "parsed when filled")
	}))
	require.Equal(t, int64(1), count(func() {
		changed := cfg
		changed.BatchSize = 7
		refilled, err := changed.WithDefaults()
		require.NoError(t, err)
		require.Equal(t, 7, refilled.BatchSize)
		require.NotSame(t, cfg.filled, refilled.filled)
	}), "a copy changed since is filled anew")

	// A client that dials only when used (nothing here uses it). Package
	// ferrytest's would import this package: not from its own test.
	lazy, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	t.Cleanup(lazy.Close)
	deps := fx.Provide(
		func() *pgxpool.Pool { return &pgxpool.Pool{} },
		func() client.Client { return lazy },
	)
	build := func(supplied Config) {
		t.Helper()
		app := fx.New(fx.NopLogger, fx.Supply(supplied), deps, fx.Module("ferry", fx.Decorate(withDefaults), relayModules),
			fx.Invoke(func(*poller.Poller, *worker.Worker) {}))
		require.NoError(t, app.Err())
	}
	require.Equal(t, int64(1), count(func() { build(raw) }), "ferry.Module: Metrics, Poller and Worker share one fill")
	require.Equal(t, int64(0), count(func() { build(cfg) }), "a filled Config is not filled again")
	require.Equal(t, int64(1), count(func() {
		_, err := New(raw, Deps{Pool: &pgxpool.Pool{}, Temporal: lazy}, Roles{Poller: true, Worker: true})
		require.NoError(t, err)
	}), "New")
}
