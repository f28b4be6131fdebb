package ferry_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

func TestNewRejects(t *testing.T) {
	t.Parallel()
	lazy := ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t))
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
		{"bad batch size", ferry.Config{BatchSize: -3}, ferry.Deps{Pool: pool, Temporal: lazy}, both, "ferry: Config.BatchSize must be 1 to 10000, got -3"},
		{"bad routing key", ferry.Config{RoutingKey: "a b"}, ferry.Deps{Pool: pool, Temporal: lazy}, both, `ferry: Config.RoutingKey "a b"`},
		{"message size over RabbitMQ's limit", ferry.Config{MaxMessageBytes: 1 << 30}, ferry.Deps{Pool: pool, Temporal: lazy}, both, "ferry: Config.MaxMessageBytes must be 1 to"},
		{"bad slot name", ferry.Config{Source: ferry.SourceWAL, WALSlot: "Ferry-Slot"}, ferry.Deps{Pool: pool, Temporal: lazy}, both, `ferry: Config.WALSlot "Ferry-Slot"`},
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
	db := ferrytest.NewDB(t, "")
	lazy := ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t))
	r, err := ferry.New(ferry.Config{
		AMQPURL:        "amqp://ferry:topsecret@" + ferrytest.ClosedAddr(t) + "/",
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
	lazy := ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t))
	r, err := ferry.New(ferry.Config{}, ferry.Deps{Pool: &pgxpool.Pool{}, Temporal: lazy}, ferry.Roles{Poller: true})
	require.NoError(t, err)
	r.Stop()
	r.Stop()
}

// Every value WithDefaults refuses is a *ferry.FieldError naming the field,
// with the value it got.
func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg   ferry.Config
		field string
		want  string
	}{
		{ferry.Config{PollInterval: time.Millisecond}, "Config.PollInterval", "ferry: Config.PollInterval must be at least 10ms, got 1ms"},
		{ferry.Config{BatchSize: 10001}, "Config.BatchSize", "got 10001"},
		{ferry.Config{StartMode: "lazy"}, "Config.StartMode", `"lazy": use one-shot or keep-alive`},
		{ferry.Config{Source: "cdc"}, "Config.Source", `"cdc"`},
		{ferry.Config{WALPublication: `p"x`}, "Config.WALPublication", `p\"x`},
		{ferry.Config{WALCatchUpInterval: time.Millisecond}, "Config.WALCatchUpInterval", "at least 1s, got 1ms"},
		{ferry.Config{WorkflowTaskPollers: 1}, "Config.WorkflowTaskPollers", "at least 2, got 1"},
		{ferry.Config{PublishBatchSize: 1001}, "Config.PublishBatchSize", "got 1001"},
		{ferry.Config{MaxBlockedRefs: -2}, "Config.MaxBlockedRefs", "-1 for no bound, got -2"},
		{ferry.Config{DriftSample: 1001}, "Config.DriftSample", "-1 for no drift check, got 1001"},
		{ferry.Config{RowRetention: time.Minute}, "Config.RowRetention", "at least 1h"},
		{ferry.Config{Policies: map[string]workflows.EventPolicy{"paid": {OnPoison: "drop"}}}, "Config.Policies", `"paid": OnPoison "drop"`},
		{ferry.Config{Effects: ferry.EffectsConfig{Routes: []string{"order.created=charge"}}}, "EffectsConfig.PaymentsURL", "a route charges or refunds"},
		{ferry.Config{Effects: ferry.EffectsConfig{Routes: []string{"order.created=email:confirmation"}}}, "EffectsConfig.SMTPAddress", "sends e-mail"},
		{ferry.Config{Effects: ferry.EffectsConfig{Routes: []string{"order.created=fax"}}}, "EffectsConfig.Routes", `unknown kind "fax"`},
		{ferry.Config{Effects: ferry.EffectsConfig{EmailAmbiguous: "maybe"}}, "EffectsConfig.EmailAmbiguous", "use resend or park"},
		{ferry.Config{Effects: ferry.EffectsConfig{PaymentsTimeout: time.Minute, PaymentAttemptTimeout: 30 * time.Second}}, "EffectsConfig.PaymentsTimeout", "shorter than"},
		{ferry.Config{Effects: ferry.EffectsConfig{PaymentEscalateAfter: 20 * time.Hour}}, "EffectsConfig.PaymentEscalateAfter", "less than half"},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			t.Parallel()
			_, err := tt.cfg.WithDefaults()
			var fe *ferry.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.field, fe.Field)
			require.ErrorContains(t, err, "ferry: "+tt.field+" ")
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err := ferry.TemporalConfig{TLSKey: "k.pem"}.WithDefaults()
	require.ErrorContains(t, err, "ferry: TemporalConfig.TLSCert and TemporalConfig.TLSKey: set both for mTLS, or neither")
	_, err = ferry.TemporalConfig{CodecKeys: []string{"short"}}.WithDefaults()
	require.ErrorContains(t, err, "ferry: TemporalConfig.CodecKeys key 1")
}

// A zero Config becomes the documented defaults; filling twice changes
// nothing.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := ferry.Config{}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, "ferry", cfg.TaskQueue)
	require.Equal(t, 200, cfg.BatchSize)
	require.Equal(t, 30*time.Second, cfg.Lease)
	require.Equal(t, time.Second, cfg.PollInterval)
	require.Equal(t, 16<<20, cfg.MaxMessageBytes)
	require.Equal(t, 100, cfg.PublishBatchSize)
	require.Equal(t, time.Minute, cfg.IdleTimeout)
	require.Equal(t, 5000, cfg.MaxBlockedRefs)
	require.Equal(t, 50, cfg.DriftSample)
	require.Equal(t, 720*time.Hour, cfg.RowRetention)
	require.Equal(t, "resend", cfg.Effects.EmailAmbiguous)
	again, err := cfg.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, cfg, again)
}

// New reads Config.Source: with "wal" the relay tails the log instead of
// claiming (it used to poll whatever Source said). The shared PostgreSQL has
// wal_level replica, so Start says so.
func TestNewHonoursSourceWAL(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	lazy := ferrytest.LazyTemporal(t, ferrytest.ClosedAddr(t))
	r, err := ferry.New(ferry.Config{Source: ferry.SourceWAL}, ferry.Deps{Pool: db.Pool, Temporal: lazy}, ferry.Roles{Poller: true})
	require.NoError(t, err)
	err = r.Start(context.Background())
	require.ErrorContains(t, err, "wal_level is not logical")
	r.Stop()
}
