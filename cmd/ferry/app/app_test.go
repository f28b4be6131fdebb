package app_test

import (
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

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/cmd/ferry/app"
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
		roles      ferry.Roles
		hasPoller  bool
		hasWorker  bool
		wantAbsent string
	}{
		{"poller only", ferry.Roles{Poller: true}, true, false, "worker.Worker"},
		{"worker only", ferry.Roles{Worker: true}, false, true, "poller.Poller"},
		{"both", ferry.Roles{Poller: true, Worker: true}, true, true, ""},
		{"both, source wal", ferry.Roles{Poller: true, Worker: true}, true, true, ""}, // the relay runs over the poller
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := defaults(t)
			if strings.HasSuffix(tt.name, "source wal") {
				cfg.Source = ferry.SourceWAL
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

// The process's Config fills every library config's defaults and the
// process's own, from the one table; set fields are kept.
func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	cfg := defaults(t)
	require.Equal(t, ferry.DefaultPostgresURL, cfg.Postgres.URL)
	require.Equal(t, ferry.DefaultAMQPURL, cfg.AMQPURL)
	require.Equal(t, ferry.DefaultTemporalAddress, cfg.Temporal.Address)
	require.Equal(t, "default", cfg.Temporal.Namespace)
	require.Equal(t, "default", cfg.Namespace, "the relay's namespace is the client's")
	require.Equal(t, 10*time.Second, cfg.Postgres.ConnectTimeout)
	require.Equal(t, 10*time.Second, cfg.Temporal.ConnectTimeout)
	require.Equal(t, "none", cfg.OTelExporter)
	require.Equal(t, time.Minute, cfg.IdleTimeout)
	require.Equal(t, poller.StartOneShot, cfg.StartMode)

	set := app.Config{
		Config: ferry.Config{
			AMQPURL: "amqp://d/", TaskQueue: "q.1:x-y_z", Exchange: "ex", RoutingKey: "all.{event_type}", BatchSize: 7, Lease: time.Minute,
			PollInterval: time.Hour, IdleTimeout: 2 * time.Minute, StartMode: poller.StartKeepAlive, ConnectTimeout: time.Second,
			RowRetention: 48 * time.Hour, Source: ferry.SourceWAL, WALSlot: "orders_slot", WALPublication: "orders_pub",
			WALCatchUpInterval: time.Minute, MaxBlockedRefs: 9,
		},
		Postgres:     ferry.PostgresConfig{URL: "postgres://a@b/c"},
		Temporal:     ferry.TemporalConfig{Address: "e:1", Namespace: "ns"},
		OTelExporter: "otlp-grpc", OTelEndpoint: "https://collector:4317", OTelServiceName: "relay",
		TemporalUIURL: "https://ui.example.com/temporal/",
	}
	got, err := set.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, "ns", got.Namespace)
	require.Equal(t, time.Second, got.Temporal.ConnectTimeout, "one connect timeout for the process")
	again, err := got.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, got, again, "filled once, the same again")
	require.Equal(t, set.Postgres.URL, got.Postgres.URL)
	require.Equal(t, set.Config.BatchSize, got.BatchSize)
	require.Equal(t, set.OTelEndpoint, got.OTelEndpoint)
	require.Equal(t, "https://ui.example.com/temporal", got.TemporalUIURL, "without the trailing slash")
}

// Library errors name the Go field (the CLI maps it to the flag); the
// process's own errors name their flag.
func TestConfigWithDefaultsRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  app.Config
		want []string
	}{
		{"task queue with a space", app.Config{Config: ferry.Config{TaskQueue: "my queue"}}, []string{"ferry: Config.TaskQueue", `"my queue"`}},
		{"negative batch size", app.Config{Config: ferry.Config{BatchSize: -1}}, []string{"ferry: Config.BatchSize must be 1 to 10000, got -1"}},
		{"half an mTLS pair", app.Config{Temporal: ferry.TemporalConfig{TLSCert: "c.pem"}}, []string{"ferry: TemporalConfig.TLSCert and TemporalConfig.TLSKey"}},
		{"unknown exporter", app.Config{OTelExporter: "zipkin"}, []string{`exporter "zipkin"`, "--otel-exporter"}},
		{"endpoint not a URL", app.Config{OTelExporter: "otlp-http", OTelEndpoint: "collector:4318"}, []string{`endpoint "collector:4318"`}},
		{"keys and a key file", app.Config{Temporal: ferry.TemporalConfig{CodecKeys: []string{key32}}, CodecKeyFile: "k"}, []string{"not both"}},
		{"bad sensitive field", app.Config{SensitiveFields: []string{"order:email"}}, []string{"--sensitive-field (FERRY_SENSITIVE_FIELDS)"}},
		{"UI address without a scheme", app.Config{TemporalUIURL: "127.0.0.1:8233"}, []string{"--temporal-ui-url (FERRY_TEMPORAL_UI_URL)", "http://127.0.0.1:8233"}},
		{"UI URL with a query", app.Config{TemporalUIURL: "http://ui/?x=1"}, []string{"--temporal-ui-url", "without user, query or fragment"}},
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

// key32 is a codec key (32 zero bytes), for tests that need a valid one.
const key32 = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

// Validation reads no file: a key file that does not exist passes
// WithDefaults and fails when the codec is built.
func TestKeyFileIsReadWhenTheCodecIsBuilt(t *testing.T) {
	t.Parallel()
	cfg, err := app.Config{CodecKeyFile: "/nonexistent/keys"}.WithDefaults()
	require.NoError(t, err)
	_, err = cfg.Codec()
	require.ErrorContains(t, err, "--codec-key-file")
	_, err = cfg.TemporalWithKeys()
	require.ErrorContains(t, err, "no such file")
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

	pool, err := ferry.PostgresConfig{URL: fmt.Sprintf("postgres://u:topsecret@127.0.0.1:%d/db", port)}.Open(ctx)
	require.Nil(t, pool)
	require.ErrorContains(t, err, "cannot reach PostgreSQL")
	require.ErrorContains(t, err, fmt.Sprintf("postgres://u:xxxxx@127.0.0.1:%d/db", port))
	require.NotContains(t, err.Error(), "topsecret")
	require.ErrorContains(t, err, "PostgresConfig.URL", "says how to point elsewhere")
}

// Neither a URL pgx rejects nor a reachable-error message ever shows the
// password, wherever the connection string put it.
func TestOpenPoolNeverShowsThePassword(t *testing.T) {
	t.Parallel()
	port := closedPort(t)
	tests := []struct {
		name, url, want string
	}{
		{"bad port", "postgres://u:topsecret@127.0.0.1:notaport/db", "not a valid PostgreSQL URL"},
		{"bad escape", "postgres://u:top%zzsecret@127.0.0.1:5432/db", "not a valid PostgreSQL URL"},
		{"bad sslmode", "postgres://u:topsecret@127.0.0.1:5432/db?sslmode=bogus", "not a valid PostgreSQL URL"},
		{"no scheme", "u:topsecret@127.0.0.1:5432/db", "not a valid PostgreSQL URL"},
		{"key=value, bad sslmode", "host=127.0.0.1 user=u password=topsecret sslmode=bogus", "not a valid PostgreSQL URL"},
		{"key=value, unreachable", fmt.Sprintf("host=127.0.0.1 port=%d user=u password=topsecret dbname=db", port), "cannot reach PostgreSQL"},
		{"password parameter, bad sslmode", "postgres://127.0.0.1:5432/db?password=topsecret&sslmode=bogus", "not a valid PostgreSQL URL"},
		{"password parameter, unreachable", fmt.Sprintf("postgres://u@127.0.0.1:%d/db?password=topsecret", port), "cannot reach PostgreSQL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pool, err := ferry.PostgresConfig{URL: tt.url}.Open(ctx)
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
