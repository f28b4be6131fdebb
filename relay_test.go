package ferry_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/internal/testenv"
)

func TestNewRejects(t *testing.T) {
	t.Parallel()
	lazy := testenv.LazyTemporal(t, testenv.ClosedAddr(t))
	pool := &pgxpool.Pool{}
	both := ferry.Roles{Poller: true, Worker: true}
	tests := []struct {
		name    string
		cfg     ferry.Config
		deps    ferry.Deps
		roles   ferry.Roles
		wantErr string
	}{
		{"no pool", ferry.Config{}, ferry.Deps{Temporal: lazy}, both, "Deps.Pool is nil"},
		{"no Temporal", ferry.Config{}, ferry.Deps{Pool: pool}, both, "Deps.Temporal is nil"},
		{"no role", ferry.Config{}, ferry.Deps{Pool: pool, Temporal: lazy}, ferry.Roles{}, "choose the poller"},
		{"bad batch size", ferry.Config{BatchSize: -3}, ferry.Deps{Pool: pool, Temporal: lazy}, both, "batch size"},
		{"bad routing key", ferry.Config{RoutingKey: "a b"}, ferry.Deps{Pool: pool, Temporal: lazy}, both, "routing key template"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := ferry.New(tt.cfg, tt.deps, tt.roles)
			require.Nil(t, r)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// A Relay that cannot reach RabbitMQ fails Start with a redacted URL and
// leaves nothing running (goleak in TestMain checks); Stop is harmless
// before, after and twice.
func TestRelayStartFailsCleanly(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	lazy := testenv.LazyTemporal(t, testenv.ClosedAddr(t))
	r, err := ferry.New(ferry.Config{
		AMQPURL:        "amqp://ferry:topsecret@" + testenv.ClosedAddr(t) + "/",
		ConnectTimeout: 2 * time.Second,
	}, ferry.Deps{Pool: db.Pool, Temporal: lazy}, ferry.Roles{Poller: true, Worker: true})
	require.NoError(t, err)
	err = r.Start(context.Background())
	require.ErrorContains(t, err, "connect to RabbitMQ at amqp://ferry:xxxxx@")
	require.NotContains(t, err.Error(), "topsecret")
	r.Stop()
	r.Stop()
	require.Error(t, r.Start(context.Background()), "a stopped relay does not start again")
}

func TestRelayStopWithoutStart(t *testing.T) {
	t.Parallel()
	lazy := testenv.LazyTemporal(t, testenv.ClosedAddr(t))
	r, err := ferry.New(ferry.Config{}, ferry.Deps{Pool: &pgxpool.Pool{}, Temporal: lazy}, ferry.Roles{Poller: true})
	require.NoError(t, err)
	r.Stop()
	r.Stop()
}
