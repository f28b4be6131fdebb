package app_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/internal/app"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func defaults(t *testing.T) app.Config {
	t.Helper()
	cfg, err := app.Config{}.WithDefaults()
	require.NoError(t, err)
	return cfg
}

// fx.ValidateApp checks the dependency graph without running a constructor,
// so nothing is dialled. Asking for the component a role set leaves out must
// fail, which shows the check can see a missing dependency at all.
func TestOptionsGraph(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	needPoller := fx.Invoke(func(*poller.Poller) {})
	needWorker := fx.Invoke(func(*worker.Worker) {})

	tests := []struct {
		name       string
		roles      app.Roles
		hasPoller  bool
		hasWorker  bool
		wantAbsent string
	}{
		{"poller only", app.Roles{Poller: true}, true, false, "worker.Worker"},
		{"worker only", app.Roles{Worker: true}, false, true, "poller.Poller"},
		{"both", app.Roles{Poller: true, Worker: true}, true, true, ""},
		{"both, source wal", app.Roles{Poller: true, Worker: true}, true, true, ""}, // the relay runs over the poller
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := defaults(t)
			if strings.HasSuffix(tt.name, "source wal") {
				cfg.Source = app.SourceWAL
			}
			opts := app.Options(cfg, tt.roles, logger)
			require.NoError(t, fx.ValidateApp(opts))

			for _, c := range []struct {
				present bool
				invoke  fx.Option
			}{{tt.hasPoller, needPoller}, {tt.hasWorker, needWorker}} {
				err := fx.ValidateApp(opts, c.invoke)
				if c.present {
					require.NoError(t, err)
				} else {
					require.ErrorContains(t, err, tt.wantAbsent)
				}
			}
		})
	}
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	cfg := defaults(t)
	require.Equal(t, app.Config{
		PostgresURL:     "postgres://postgres@127.0.0.1:5432/postgres",
		AMQPURL:         "amqp://guest:guest@127.0.0.1:5672/",
		TemporalAddress: "127.0.0.1:7233",
		Namespace:       "default",
		TaskQueue:       "ferry",
		Exchange:        "ferry.events",
		RoutingKey:      "{aggregate_type}.{event_type}",
		BatchSize:       200,
		Lease:           30 * time.Second,
		PollInterval:    time.Second,
		StartMode:       poller.StartOneShot,
		ConnectTimeout:  10 * time.Second,
		RowRetention:    30 * 24 * time.Hour,
		OTelExporter:    "none",
		Source:          app.SourcePoll,
		WALSlot:         "ferry_outbox",
		WALPublication:  "ferry_outbox",

		WALCatchUpInterval: 30 * time.Second,
	}, cfg)
	require.Equal(t, app.DefaultPostgresURL, cfg.PostgresURL)
	require.Equal(t, app.DefaultAMQPURL, cfg.AMQPURL)
	require.Equal(t, app.DefaultTemporalAddress, cfg.TemporalAddress)
	// IdleTimeout stays zero: the workflow applies its documented 1m.
	require.Equal(t, time.Minute, cmp.Or(cfg.IdleTimeout, workflows.DefaultIdleTimeout))

	set := app.Config{
		PostgresURL: "postgres://a@b/c", AMQPURL: "amqp://d/", TemporalAddress: "e:1", Namespace: "ns",
		TaskQueue: "q.1:x-y_z", Exchange: "ex", RoutingKey: "all.{event_type}", BatchSize: 7, Lease: time.Minute, PollInterval: time.Hour,
		IdleTimeout: 2 * time.Minute, StartMode: poller.StartKeepAlive, ConnectTimeout: time.Second, RowRetention: 48 * time.Hour,
		OTelExporter: "otlp-grpc", OTelEndpoint: "https://collector:4317", OTelServiceName: "relay",
		Source: app.SourceWAL, WALSlot: "orders_slot", WALPublication: "orders_pub", WALCatchUpInterval: time.Minute,
		MaxBlockedRefs: 9,
	}
	got, err := set.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, set, got, "set fields are kept")
}

func TestConfigWithDefaultsRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  app.Config
		want []string
	}{
		{"task queue with a space", app.Config{TaskQueue: "my queue"}, []string{"task queue", `"my queue"`}},
		{"task queue with a slash", app.Config{TaskQueue: "a/b"}, []string{"task queue", `"a/b"`}},
		{"task queue too long", app.Config{TaskQueue: strings.Repeat("q", 201)}, []string{"task queue"}},
		{"negative batch size", app.Config{BatchSize: -1}, []string{"batch size"}},
		{"drift sample too large", app.Config{DriftSample: 1001}, []string{"drift sample 1001", "-1 for no drift check"}},
		{"drift sample below -1", app.Config{DriftSample: -2}, []string{"drift sample -2"}},
		{"max blocked refs below -1", app.Config{MaxBlockedRefs: -2}, []string{"max blocked refs -2", "-1 for no bound"}},
		{"unknown exporter", app.Config{OTelExporter: "zipkin"}, []string{`exporter "zipkin"`, "otlp-grpc"}},
		{"unknown start mode", app.Config{StartMode: "lazy"}, []string{`start mode "lazy"`, "one-shot", "keep-alive"}},
		{"unknown source", app.Config{Source: "cdc"}, []string{`source "cdc"`, "poll", "wal"}},
		{"slot name not an identifier", app.Config{Source: app.SourceWAL, WALSlot: "Ferry-Slot"}, []string{`Config.Slot "Ferry-Slot"`}},
		{"publication name with a quote", app.Config{WALPublication: `p"x`}, []string{`Config.Publication`}},
		{"catch-up too often", app.Config{WALCatchUpInterval: time.Millisecond}, []string{"Config.CatchUpInterval"}},
		{"endpoint not a URL", app.Config{OTelExporter: "otlp-http", OTelEndpoint: "collector:4318"}, []string{`endpoint "collector:4318"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.cfg.WithDefaults()
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

func TestOpenPoolUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port := closedPort(t)

	pool, err := app.OpenPool(ctx, fmt.Sprintf("postgres://u:topsecret@127.0.0.1:%d/db", port))
	require.Nil(t, pool)
	require.ErrorContains(t, err, "cannot reach PostgreSQL")
	require.ErrorContains(t, err, fmt.Sprintf("postgres://u:xxxxx@127.0.0.1:%d/db", port))
	require.NotContains(t, err.Error(), "topsecret")
	require.ErrorContains(t, err, "FERRY_POSTGRES_URL", "says how to point elsewhere")
}

// Neither a URL pgx rejects nor a reachable-error message ever shows the
// password, wherever the connection string put it.
func TestOpenPoolNeverShowsThePassword(t *testing.T) {
	t.Parallel()
	port := closedPort(t)
	tests := []struct {
		name, url, want string
	}{
		{"bad port", "postgres://u:topsecret@127.0.0.1:notaport/db", "is not valid"},
		{"bad escape", "postgres://u:top%zzsecret@127.0.0.1:5432/db", "is not valid"},
		{"bad sslmode", "postgres://u:topsecret@127.0.0.1:5432/db?sslmode=bogus", "is not valid"},
		{"no scheme", "u:topsecret@127.0.0.1:5432/db", "is not valid"},
		{"key=value, bad sslmode", "host=127.0.0.1 user=u password=topsecret sslmode=bogus", "is not valid"},
		{"key=value, unreachable", fmt.Sprintf("host=127.0.0.1 port=%d user=u password=topsecret dbname=db", port), "cannot reach PostgreSQL"},
		{"password parameter, bad sslmode", "postgres://127.0.0.1:5432/db?password=topsecret&sslmode=bogus", "is not valid"},
		{"password parameter, unreachable", fmt.Sprintf("postgres://u@127.0.0.1:%d/db?password=topsecret", port), "cannot reach PostgreSQL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pool, err := app.OpenPool(ctx, tt.url)
			require.Nil(t, pool)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "topsecret")
			require.NotContains(t, err.Error(), "secret")
		})
	}
}

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in       string
		wantType string
		want     workflows.EventPolicy
		wantErr  string
	}{
		{in: "paid:max-attempts=3", wantType: "paid", want: workflows.EventPolicy{MaxAttempts: 3}},
		{in: "*:on-poison=skip", wantType: "*", want: workflows.EventPolicy{OnPoison: "skip"}},
		{in: "created:max-attempts=5,on-poison=block", wantType: "created", want: workflows.EventPolicy{MaxAttempts: 5, OnPoison: "block"}},
		{in: "paid", wantErr: "use TYPE:max-attempts"},
		{in: "paid:max-attempts=0", wantErr: "from 1 to 1000"},
		{in: "paid:on-poison=drop", wantErr: "must be block or skip"},
		{in: "paid:retries=3", wantErr: `unknown setting "retries"`},
	}
	for _, tt := range tests {
		typ, p, err := app.ParsePolicy(tt.in)
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.wantType, typ)
		require.Equal(t, tt.want, p)
	}
}
