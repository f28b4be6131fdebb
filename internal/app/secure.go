package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/broker"
)

const hidden = "xxxxx"

// temporalTLSEnabled: any TLS setting, or an API key (which the SDK never
// sends in plaintext unless told to, and Ferry never tells it to).
func (c Config) temporalTLSEnabled() bool {
	return c.TemporalTLS || c.TemporalTLSCA != "" || c.TemporalTLSCert != "" || c.TemporalTLSKey != "" ||
		c.TemporalTLSServerName != "" || c.TemporalAPIKey != ""
}

func (c Config) validateTemporalTLS() error {
	if (c.TemporalTLSCert == "") != (c.TemporalTLSKey == "") {
		return errors.New("Temporal mTLS: set both TemporalTLSCert (--temporal-tls-cert) and TemporalTLSKey (--temporal-tls-key), or neither")
	}
	return nil
}

// temporalConnection turns the TLS and API key settings into the SDK's
// connection options. Files are read here, at dial time, so a restart picks
// up rotated certificates.
func (c Config) temporalConnection() (client.ConnectionOptions, client.Credentials, error) {
	var opts client.ConnectionOptions
	if !c.temporalTLSEnabled() {
		return opts, nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TemporalTLSServerName}
	if tc.ServerName == "" {
		if host, _, err := net.SplitHostPort(c.TemporalAddress); err == nil {
			tc.ServerName = host
		}
	}
	if c.TemporalTLSCA != "" {
		pem, err := os.ReadFile(c.TemporalTLSCA)
		if err != nil {
			return opts, nil, fmt.Errorf("Temporal TLS CA (--temporal-tls-ca): %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return opts, nil, fmt.Errorf("Temporal TLS CA (--temporal-tls-ca) %s: no PEM certificate in it", c.TemporalTLSCA)
		}
		tc.RootCAs = pool
	}
	if c.TemporalTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TemporalTLSCert, c.TemporalTLSKey)
		if err != nil {
			// The error names the files, never their contents.
			return opts, nil, fmt.Errorf("Temporal mTLS client certificate (--temporal-tls-cert, --temporal-tls-key): %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	opts.TLS = tc
	var creds client.Credentials
	if c.TemporalAPIKey != "" {
		creds = client.NewAPIKeyStaticCredentials(c.TemporalAPIKey)
	}
	return opts, creds, nil
}

// Redacted returns a copy that is safe to print: URL passwords, the API
// key and the codec keys are replaced by xxxxx.
func (c Config) Redacted() Config {
	c.PostgresURL = broker.Redact(c.PostgresURL)
	c.AMQPURL = broker.Redact(c.AMQPURL)
	if c.TemporalAPIKey != "" {
		c.TemporalAPIKey = hidden
	}
	if len(c.CodecKeys) > 0 {
		c.CodecKeys = []string{hidden}
	}
	return c
}

// String prints the redacted configuration, so that %v and %+v never show
// a secret.
func (c Config) String() string {
	type plain Config // no String method: no recursion
	return fmt.Sprintf("%+v", plain(c.Redacted()))
}

// LogValue makes slog print the redacted configuration.
func (c Config) LogValue() slog.Value {
	r := c.Redacted()
	return slog.GroupValue(
		slog.String("postgres_url", r.PostgresURL),
		slog.String("amqp_url", r.AMQPURL),
		slog.String("temporal_address", r.TemporalAddress),
		slog.String("namespace", r.Namespace),
		slog.Bool("temporal_tls", r.temporalTLSEnabled()),
		slog.String("temporal_tls_ca", r.TemporalTLSCA),
		slog.String("temporal_tls_cert", r.TemporalTLSCert),
		slog.String("temporal_tls_server_name", r.TemporalTLSServerName),
		slog.String("temporal_api_key", r.TemporalAPIKey),
		slog.Bool("payload_codec", len(r.CodecKeys) > 0 || r.CodecKeyFile != ""),
		slog.String("codec_key_file", r.CodecKeyFile),
		slog.Any("sensitive_fields", r.SensitiveFields),
		slog.String("task_queue", r.TaskQueue),
		slog.String("exchange", r.Exchange),
		slog.Int("max_message_bytes", r.MaxMessageBytes),
		slog.String("routing_key", r.RoutingKey),
		slog.Int("batch_size", r.BatchSize),
		slog.Duration("lease", r.Lease),
		slog.Duration("poll_interval", r.PollInterval),
		slog.Duration("idle_timeout", r.IdleTimeout),
		slog.String("start_mode", r.StartMode),
		slog.Duration("connect_timeout", r.ConnectTimeout),
	)
}
