package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/cmd/ferry/internal/settings"
	"github.com/ferry-outbox/ferry/ferrytest"
)

// Every persistent flag comes from the settings table, with the table's
// usage and default, and every row with a name has its flag: --help cannot
// drift from the table (nor, through the generated page, from
// docs/configuration.md). Not parallel: flags read FERRY_* variables when
// they are defined.
func TestFlagsFromTheTable(t *testing.T) {
	for _, s := range settings.Flags() {
		if s.Env != "" {
			t.Setenv(s.Env, "") // empty counts as unset: the table's defaults
		}
	}
	root, _ := newRoot(&bytes.Buffer{}, &bytes.Buffer{}, nil)
	fs := root.PersistentFlags()
	for _, s := range settings.Flags() {
		f := fs.Lookup(s.Name)
		require.NotNil(t, f, "no flag --%s", s.Name)
		require.Equal(t, s.HelpUsage(), f.Usage, s.Name)
		want := pflagDefault(t, s)
		if s.Secret && strings.Contains(want, "://") {
			want = broker.Redact(want) // --help never shows a password, not even guest's
		}
		require.Equal(t, want, f.DefValue, "--%s's default", s.Name)
	}
	fs.VisitAll(func(f *pflag.Flag) {
		_, ok := settings.ByName(f.Name)
		require.True(t, ok, "--%s is defined outside internal/settings", f.Name)
	})

	var out bytes.Buffer
	require.Equal(t, 0, Main([]string{"--help"}, &out, &bytes.Buffer{}, nil))
	for _, s := range settings.Flags() {
		require.Contains(t, out.String(), "--"+s.Name)
		require.Contains(t, strings.Join(strings.Fields(out.String()), " "), s.HelpUsage(), "--help shows the table's usage")
	}
}

// pflagDefault is how pflag prints the table's default.
func pflagDefault(t *testing.T, s settings.Setting) string {
	t.Helper()
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	switch d := s.Default.(type) {
	case string:
		fs.String("f", d, "")
	case int:
		fs.Int("f", d, "")
	case bool:
		fs.Bool("f", d, "")
	case time.Duration:
		fs.Duration("f", d, "")
	case []string:
		fs.StringArray("f", d, "")
	}
	return fs.Lookup("f").DefValue
}

// The table's environment variables and config-file keys land in the
// fields the table names. Not parallel: t.Setenv.
func TestSettingsReachTheirFields(t *testing.T) {
	t.Setenv("FERRY_BATCH_SIZE", "7")
	t.Setenv("FERRY_TEMPORAL_ADDRESS", "temporal.internal:7233")
	t.Setenv("FERRY_POLICY", "paid:max-attempts=3;*:on-poison=skip")
	t.Setenv("FERRY_NO_SCHEDULES", "true")
	file := filepath.Join(t.TempDir(), "ferry.yaml")
	require.NoError(t, os.WriteFile(file, []byte("lease: 45s\nbatch-size: 9\neffect: order.created=charge;order.cancelled=refund\npayments-url: http://pay\nmetrics-address: 127.0.0.1:9090\n"), 0o600))

	root, g := newRoot(&bytes.Buffer{}, &bytes.Buffer{}, nil)
	require.NoError(t, root.PersistentFlags().Parse([]string{"--config", file, "--poll-interval", "250ms", "--namespace", "orders"}))
	require.NoError(t, root.PersistentPreRunE(root, nil))
	cfg, _, err := g.config()
	require.NoError(t, err)
	require.Equal(t, 7, cfg.BatchSize, "the environment beats the file")
	require.Equal(t, 45*time.Second, cfg.Lease, "the file beats the default")
	require.Equal(t, 250*time.Millisecond, cfg.PollInterval)
	require.Equal(t, "temporal.internal:7233", cfg.Temporal.Address)
	require.Equal(t, "orders", cfg.Temporal.Namespace)
	require.Equal(t, "orders", cfg.Namespace, "the worker checks the namespace the client dials")
	require.True(t, cfg.NoSchedules)
	require.Equal(t, []string{"order.created=charge;order.cancelled=refund"}, cfg.Effects.Routes, "one value in the file, routes separated by ;")
	require.Equal(t, "http://pay", cfg.Effects.PaymentsURL)
	require.Equal(t, "127.0.0.1:9090", cfg.MetricsAddress)
	require.Equal(t, int32(3), cfg.Policies["paid"].MaxAttempts)
	require.Equal(t, "skip", cfg.Policies["*"].OnPoison)
}

// A bad value is reported with the flag and variable that set it, not the
// Go field the library names. Not parallel: the flags read FERRY_*
// variables.
func TestErrorsNameFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--poll-interval", "1ms"}, "ferry: --poll-interval (FERRY_POLL_INTERVAL) must be at least 10ms, got 1ms\n"},
		{[]string{"--lease", "3s"}, "ferry: --lease (FERRY_LEASE) must exceed the signal timeout 5s + the mark timeout 5s, got 3s\n"},
		{[]string{"--batch-size", "-1"}, "ferry: --batch-size (FERRY_BATCH_SIZE) must be 1 to 10000, got"},
		{[]string{"--task-queue", "my queue"}, `ferry: --task-queue (FERRY_TASK_QUEUE) "my queue": use 1-200`},
		{[]string{"--exchange", "a b"}, `ferry: --exchange (FERRY_EXCHANGE) "a b"`},
		{[]string{"--amqp-url", "http://u:topsecret@mq/"}, "ferry: --amqp-url (FERRY_AMQP_URL) http://u:xxxxx@mq/: must be amqp://"},
		{[]string{"--source", "wal", "--wal-slot", "Ferry-Slot"}, `ferry: --wal-slot (FERRY_WAL_SLOT) "Ferry-Slot"`},
		{[]string{"--temporal-tls-cert", "c.pem"}, "ferry: --temporal-tls-cert (FERRY_TEMPORAL_TLS_CERT) and --temporal-tls-key (FERRY_TEMPORAL_TLS_KEY): set both"},
		{[]string{"--effect", "order.created=charge"}, "ferry: --payments-url (FERRY_PAYMENTS_URL) is required: a route charges or refunds"},
		{[]string{"--payments-timeout", "2m"}, "ferry: --payments-timeout (FERRY_PAYMENTS_TIMEOUT) 2m0s must be shorter than --payment-attempt-timeout (FERRY_PAYMENT_ATTEMPT_TIMEOUT) 1m0s"},
		{[]string{"--drift-sample", "5000"}, "ferry: --drift-sample (FERRY_DRIFT_SAMPLE) must be 1 to 1000"},
		{[]string{"--destination", "order.created=start:fulfilment,type=Fulfilment"}, "ferry: --destination (FERRY_DESTINATIONS) destination order.created=start:fulfilment,type=Fulfilment: start needs queue=<task queue>"},
		{[]string{"--destination", "order.paid=signal:f,id=f-{order}"}, "unknown placeholder {order}"},
		{[]string{"--no-broker"}, "ferry: --no-broker (FERRY_NO_BROKER) needs --destination (FERRY_DESTINATIONS): without a broker"},
	}
	// A closed port: a case that passed validation must not migrate a
	// database anyone uses.
	nowhere := "postgres://u@" + ferrytest.ClosedAddr(t) + "/none"
	for _, tt := range tests {
		var errOut bytes.Buffer
		code := Main(append([]string{"migrate", "--postgres-url", nowhere}, tt.args...), &bytes.Buffer{}, &errOut, nil)
		require.Equal(t, 1, code, tt.args)
		require.Contains(t, errOut.String(), tt.want, tt.args)
		require.NotContains(t, errOut.String(), "Config.", "no Go field left: %s", errOut.String())
		require.NotContains(t, errOut.String(), "topsecret")
	}
}

// explain maps every field with a flag, the longest name first, and leaves
// the others and the rest of the text alone.
func TestExplain(t *testing.T) {
	t.Parallel()
	for _, s := range settings.Flags() {
		for _, f := range s.Fields {
			got := explain(&ferry.FieldError{Field: f, Problem: "is wrong"})
			require.Equal(t, flagRef(s)+" is wrong", got, f)
		}
	}
	require.Equal(t, "--temporal-tls-ca (FERRY_TEMPORAL_TLS_CA) cannot be read",
		explain(&ferry.FieldError{Field: "TemporalConfig.TLSCA", Problem: "cannot be read"}))
	require.Equal(t, "cannot reach Temporal; set --temporal-address (FERRY_TEMPORAL_ADDRESS) to point elsewhere",
		explain(errors.New("cannot reach Temporal; set TemporalConfig.Address to point elsewhere")))
	require.Equal(t, "TemporalConfig.ConnectTimeout must be positive",
		explain(errors.New("ferry: TemporalConfig.ConnectTimeout must be positive")), "a field without a flag keeps its name")
}
