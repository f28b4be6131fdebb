package ferry_test

import (
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// What an embedding service brings: its own pool and Temporal client.
func serviceDeps() fx.Option {
	return fx.Provide(
		func() *pgxpool.Pool { return nil },
		func() client.Client { return nil },
	)
}

var (
	needPoller = fx.Invoke(func(*poller.Poller) {})
	needWorker = fx.Invoke(func(*worker.Worker) {})
)

// fx.ValidateApp checks the graph without calling a constructor, so nothing
// is dialled. The failing cases show the check sees a missing dependency.
func TestModulesGraph(t *testing.T) {
	t.Parallel()
	cfg := fx.Supply(ferry.Config{})
	tests := []struct {
		name    string
		opts    []fx.Option
		wantErr string
	}{
		{"everything from Config", []fx.Option{cfg, ferry.Module, needPoller, needWorker}, ""},
		{"poller and worker over the service's pool and client", []fx.Option{cfg, serviceDeps(), ferry.Poller, ferry.Worker, needPoller, needWorker}, ""},
		{"poller alone", []fx.Option{cfg, serviceDeps(), ferry.Poller, needPoller}, ""},
		{"worker alone", []fx.Option{cfg, serviceDeps(), ferry.Worker, needWorker}, ""},
		{"with a logger", []fx.Option{cfg, fx.Supply(slog.Default()), ferry.Module, needPoller}, ""},
		{"no pool", []fx.Option{cfg, ferry.Temporal, ferry.Poller}, "pgxpool.Pool"},
		{"no Temporal client", []fx.Option{cfg, ferry.Postgres, ferry.Worker}, "client.Client"},
		{"no Config", []fx.Option{serviceDeps(), ferry.Poller}, "ferry.Config"},
		{"worker not asked for", []fx.Option{cfg, serviceDeps(), ferry.Poller, needWorker}, "worker.Worker"},
		// The worker's publisher is its own business, not the service's.
		{"publisher stays private", []fx.Option{cfg, serviceDeps(), ferry.Worker, fx.Invoke(func(*broker.Publisher) {})}, "broker.Publisher"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := fx.ValidateApp(append(tt.opts, fx.NopLogger)...)
			if tt.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tt.wantErr)
			}
		})
	}
}

// The modules fill defaults and validate the Config a service supplies,
// before anything starts: a bad value fails fx.New with the field's name.
func TestModulesValidateConfig(t *testing.T) {
	t.Parallel()
	lazy := ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t))
	deps := fx.Provide(
		func() *pgxpool.Pool { return &pgxpool.Pool{} },
		func() client.Client { return lazy },
	)
	tests := []struct {
		name    string
		cfg     ferry.Config
		modules fx.Option
		invoke  fx.Option
		wantErr string
	}{
		{"zero Config is fine", ferry.Config{}, ferry.Poller, needPoller, ""},
		{"bad task queue", ferry.Config{TaskQueue: "my queue"}, ferry.Poller, needPoller, `ferry: Config.TaskQueue "my queue"`},
		{"lease too short", ferry.Config{Lease: 2e9}, ferry.Poller, needPoller, "ferry: Config.Lease must exceed the signal timeout 5s + the mark timeout 5s, got 2s"},
		{"bad exchange", ferry.Config{Exchange: "no spaces"}, ferry.Worker, needWorker, `ferry: Config.Exchange "no spaces"`},
		{"not AMQP", ferry.Config{AMQPURL: "http://u:topsecret@host/"}, ferry.Worker, needWorker, "ferry: Config.AMQPURL http://u:xxxxx@host/: must be amqp://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// fx.New runs constructors and invokes, not lifecycle hooks:
			// nothing is dialled or started.
			app := fx.New(fx.NopLogger, fx.Supply(tt.cfg), deps, tt.modules, tt.invoke)
			if tt.wantErr == "" {
				require.NoError(t, app.Err())
				return
			}
			require.ErrorContains(t, app.Err(), tt.wantErr)
			require.NotContains(t, app.Err().Error(), "topsecret")
		})
	}
}
