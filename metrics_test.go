package ferry_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/metrics"
)

// A service that embeds Ferry with fx and has a Prometheus registry of its
// own gets Ferry's metrics on it: the backlog read from its pool, and the
// counters the poller and worker count into.
func TestMetricsModuleUsesTheServicesRegisterer(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'created', '{}')`)
	require.NoError(t, err)
	lazy := ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t))
	reg := prometheus.NewRegistry()
	var m *metrics.Metrics
	app := fx.New(fx.NopLogger, fx.Supply(ferry.Config{}),
		fx.Provide(func() *pgxpool.Pool { return db.Pool }, func() client.Client { return lazy },
			func() prometheus.Registerer { return reg }),
		ferry.Metrics, ferry.Poller, needPoller,
		fx.Populate(&m))
	require.NoError(t, app.Err())
	require.NotNil(t, m, "the poller counts into Ferry's metrics")

	require.Equal(t, 1.0, ferrytest.Sample(t, reg, "ferry_outbox_events", nil), "the pending row, read from the service's pool")
	require.True(t, ferrytest.HasMetric(t, reg, "ferry_outbox_oldest_age_seconds"))
	require.Positive(t, ferrytest.Sample(t, reg, "ferry_outbox_table_bytes", nil))
	require.True(t, ferrytest.HasMetric(t, reg, "ferry_relay_claimed_total"))
	require.False(t, ferrytest.HasMetric(t, reg, "go_goroutines"), "the service's registry keeps its own runtime collectors")

	// Stopping the app takes Ferry's collectors off the service's registry.
	require.NoError(t, app.Start(context.Background()))
	require.NoError(t, app.Stop(context.Background()))
	require.False(t, ferrytest.HasMetric(t, reg, "ferry_outbox_table_bytes"))

	// A service that registered consumer metrics of its own is told to take
	// Ferry's from the graph.
	dup := prometheus.NewRegistry()
	_, err = metrics.NewConsumer(dup)
	require.NoError(t, err)
	clash := fx.New(fx.NopLogger, fx.Supply(ferry.Config{}),
		fx.Provide(func() *pgxpool.Pool { return db.Pool }, func() prometheus.Registerer { return dup }),
		ferry.Metrics, fx.Invoke(func(*metrics.Metrics) {}))
	require.ErrorContains(t, clash.Err(), "take its *metrics.Consumer from the graph")
	require.False(t, ferrytest.HasMetric(t, dup, "ferry_relay_claimed_total"), "nothing of Ferry's left behind")
}

// ferry.New registers the same metrics on Deps.Metrics; registering twice on
// one registry is an error naming the field, not a panic.
func TestNewRegistersMetricsOnDeps(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	lazy := ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t))
	reg := prometheus.NewRegistry()
	deps := ferry.Deps{Pool: db.Pool, Temporal: lazy, Metrics: reg}
	r, err := ferry.New(ferry.Config{}, deps, ferry.Roles{Poller: true, Worker: true})
	require.NoError(t, err)
	t.Cleanup(r.Stop)
	require.Positive(t, ferrytest.Sample(t, reg, "ferry_outbox_table_bytes", nil))
	require.True(t, ferrytest.HasMetric(t, reg, "ferry_relay_claimed_total"))

	_, err = ferry.New(ferry.Config{}, deps, ferry.Roles{Poller: true})
	require.ErrorContains(t, err, "Deps.Metrics")

	// Stop takes them off the registry (the pool they read may close next),
	// and so does a New that fails: a retry on the same registry works.
	r.Stop()
	require.False(t, ferrytest.HasMetric(t, reg, "ferry_outbox_table_bytes"))
	again, err := ferry.New(ferry.Config{}, deps, ferry.Roles{Poller: true})
	require.NoError(t, err)
	again.Stop()

	// A registration that fails half-way (the outbox collector clashes with
	// a series of the service's) leaves nothing of Ferry's behind.
	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "ferry_outbox_table_bytes", Help: "the service's own"}))
	_, err = ferry.New(ferry.Config{}, ferry.Deps{Pool: db.Pool, Temporal: lazy, Metrics: clash}, ferry.Roles{Poller: true})
	require.ErrorContains(t, err, "Deps.Metrics")
	require.False(t, ferrytest.HasMetric(t, clash, "ferry_relay_claimed_total"))
}
