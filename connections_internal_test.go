package ferry

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest/servers"
)

func TestTemporalConnection(t *testing.T) {
	t.Parallel()
	pki := servers.NewPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))

	t.Run("plaintext by default", func(t *testing.T) {
		t.Parallel()
		conn, creds, err := TemporalConfig{Address: "t:7233"}.connection()
		require.NoError(t, err)
		require.Nil(t, conn.TLS)
		require.Nil(t, creds)
	})
	t.Run("TLS with system roots, server name from the address", func(t *testing.T) {
		t.Parallel()
		conn, _, err := TemporalConfig{Address: "ns.tmprl.cloud:7233", TLS: true}.connection()
		require.NoError(t, err)
		require.NotNil(t, conn.TLS)
		require.Nil(t, conn.TLS.RootCAs, "system roots")
		require.Equal(t, "ns.tmprl.cloud", conn.TLS.ServerName)
		require.False(t, conn.TLS.InsecureSkipVerify)
	})
	t.Run("mTLS with a CA and a server name", func(t *testing.T) {
		t.Parallel()
		conn, creds, err := TemporalConfig{
			Address: "10.0.0.1:7233", TLSCA: pki.CAFile, TLSServerName: "temporal.internal",
			TLSCert: pki.ClientCertFile, TLSKey: pki.ClientKeyFile,
		}.connection()
		require.NoError(t, err)
		require.NotNil(t, conn.TLS.RootCAs)
		require.Len(t, conn.TLS.Certificates, 1)
		require.Equal(t, "temporal.internal", conn.TLS.ServerName)
		require.Nil(t, creds)
	})
	t.Run("an API key implies TLS", func(t *testing.T) {
		t.Parallel()
		conn, creds, err := TemporalConfig{Address: "t:7233", APIKey: "k"}.connection()
		require.NoError(t, err)
		require.NotNil(t, conn.TLS)
		require.NotNil(t, creds)
	})
	errs := []struct {
		name string
		cfg  TemporalConfig
		want string
	}{
		{"missing CA file", TemporalConfig{TLSCA: "/nonexistent/ca.pem"}, "ferry: TemporalConfig.TLSCA cannot be read: open /nonexistent/ca.pem"},
		{"CA file without PEM", TemporalConfig{TLSCA: notPEM}, "no PEM certificate"},
		{"key does not match", TemporalConfig{TLSCert: pki.ClientCertFile, TLSKey: pki.ServerKeyFile}, "ferry: TemporalConfig.TLSCert and TemporalConfig.TLSKey"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := tt.cfg.connection()
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// However a config is printed or logged, no secret shows.
func TestConfigsNeverShowSecrets(t *testing.T) {
	t.Parallel()
	pg := PostgresConfig{URL: "postgres://ferry:pgsecret@db:5432/app?sslmode=verify-full"}
	tc := TemporalConfig{APIKey: "apikeysecret", CodecKeys: []string{"k:keysecret"}}
	rc := Config{AMQPURL: "amqps://ferry:mqsecret@mq:5671/", Effects: EffectsConfig{PaymentsAPIKey: "paysecret"}}
	var logged bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&logged, nil), slog.NewJSONHandler(&logged, nil)} {
		slog.New(h).Info("config", "postgres", pg, "temporal", tc, "relay", rc)
	}
	for _, out := range []string{fmt.Sprint(pg, tc, rc), fmt.Sprintf("%v %+v %s %+v %+v", pg, tc, rc, rc.Effects, rc), logged.String()} {
		for _, secret := range []string{"pgsecret", "mqsecret", "apikeysecret", "keysecret", "paysecret"} {
			require.NotContains(t, out, secret)
		}
		require.Contains(t, out, "postgres://ferry:xxxxx@db:5432/app?sslmode=verify-full")
		require.Contains(t, out, "amqps://ferry:xxxxx@mq:5671/")
	}
	require.Equal(t, "apikeysecret", tc.APIKey, "Redacted works on a copy")
}
