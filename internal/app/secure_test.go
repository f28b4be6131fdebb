package app

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/internal/testenv"
)

func TestTemporalConnection(t *testing.T) {
	t.Parallel()
	pki := testenv.NewPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))

	t.Run("plaintext by default", func(t *testing.T) {
		t.Parallel()
		conn, creds, err := Config{TemporalAddress: "t:7233"}.temporalConnection()
		require.NoError(t, err)
		require.Nil(t, conn.TLS)
		require.Nil(t, creds)
	})
	t.Run("TLS with system roots, server name from the address", func(t *testing.T) {
		t.Parallel()
		conn, _, err := Config{TemporalAddress: "ns.tmprl.cloud:7233", TemporalTLS: true}.temporalConnection()
		require.NoError(t, err)
		require.NotNil(t, conn.TLS)
		require.Nil(t, conn.TLS.RootCAs, "system roots")
		require.Equal(t, "ns.tmprl.cloud", conn.TLS.ServerName)
		require.False(t, conn.TLS.InsecureSkipVerify)
	})
	t.Run("mTLS with a CA and a server name", func(t *testing.T) {
		t.Parallel()
		conn, creds, err := Config{
			TemporalAddress: "10.0.0.1:7233", TemporalTLSCA: pki.CAFile, TemporalTLSServerName: "temporal.internal",
			TemporalTLSCert: pki.ClientCertFile, TemporalTLSKey: pki.ClientKeyFile,
		}.temporalConnection()
		require.NoError(t, err)
		require.NotNil(t, conn.TLS.RootCAs)
		require.Len(t, conn.TLS.Certificates, 1)
		require.Equal(t, "temporal.internal", conn.TLS.ServerName)
		require.Nil(t, creds)
	})
	t.Run("an API key implies TLS", func(t *testing.T) {
		t.Parallel()
		conn, creds, err := Config{TemporalAddress: "t:7233", TemporalAPIKey: "k"}.temporalConnection()
		require.NoError(t, err)
		require.NotNil(t, conn.TLS)
		require.NotNil(t, creds)
	})
	errs := []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing CA file", Config{TemporalTLSCA: "/nonexistent/ca.pem"}, "--temporal-tls-ca"},
		{"CA file without PEM", Config{TemporalTLSCA: notPEM}, "no PEM certificate"},
		{"key does not match", Config{TemporalTLSCert: pki.ClientCertFile, TemporalTLSKey: pki.ServerKeyFile}, "--temporal-tls-cert"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := tt.cfg.temporalConnection()
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// However a Config is printed or logged, no secret shows.
func TestConfigNeverShowsSecrets(t *testing.T) {
	t.Parallel()
	cfg, err := Config{
		PostgresURL:    "postgres://ferry:pgsecret@db:5432/app?sslmode=verify-full",
		AMQPURL:        "amqps://ferry:mqsecret@mq:5671/",
		TemporalAPIKey: "apikeysecret",
	}.WithDefaults()
	require.NoError(t, err)
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "config", cfg)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "config", cfg)
	for _, out := range []string{fmt.Sprint(cfg), fmt.Sprintf("%v %+v %s", cfg, cfg, cfg), logged.String()} {
		for _, secret := range []string{"pgsecret", "mqsecret", "apikeysecret"} {
			require.NotContains(t, out, secret)
		}
		require.Contains(t, out, "postgres://ferry:xxxxx@db:5432/app?sslmode=verify-full")
		require.Contains(t, out, "amqps://ferry:xxxxx@mq:5671/")
	}
	require.Equal(t, "apikeysecret", cfg.TemporalAPIKey, "Redacted works on a copy")
}
