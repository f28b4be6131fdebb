package ferry

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/codec"
)

// PostgresConfig is the Postgres module's connection settings, for a
// service that has no pool of its own yet.
type PostgresConfig struct {
	// URL in libpq syntax; TLS is in the URL (sslmode=verify-full,
	// sslrootcert=…). Its password is never printed. Default
	// "postgres://postgres@127.0.0.1:5432/postgres".
	URL string
	// ConnectTimeout bounds opening the pool and its first ping. Default
	// 10s.
	ConnectTimeout time.Duration
}

// WithDefaults fills the zero fields; there is nothing to check by value
// (the URL is parsed when the pool opens: parsing reads the files it names).
func (c PostgresConfig) WithDefaults() (PostgresConfig, error) {
	c.URL = cmp.Or(c.URL, DefaultPostgresURL)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, DefaultConnectTimeout)
	if c.ConnectTimeout < 0 {
		return c, fieldErr("PostgresConfig.ConnectTimeout", "must be positive, got %s", c.ConnectTimeout)
	}
	return c, nil
}

// Open opens the pool and checks that PostgreSQL answers, with an error
// that says what to do when it does not. The caller closes the pool.
func (c PostgresConfig) Open(ctx context.Context) (*pgxpool.Pool, error) {
	c, err := c.WithDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	defer cancel()
	pcfg, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		// pgx's parse errors can echo the URL; never print a password.
		return nil, fieldErr("PostgresConfig.URL", "%s: not a valid PostgreSQL URL", redactURL(c.URL))
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s: %w", redactURL(c.URL), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %s\n  Is it running? Set PostgresConfig.URL to point elsewhere", redactURL(c.URL), shortErr(err))
	}
	return pool, nil
}

// TemporalConfig is the Temporal module's connection settings, for a
// service that has no client of its own yet.
type TemporalConfig struct {
	// Address host:port of the frontend. Default "127.0.0.1:7233".
	Address string
	// Namespace to connect to. Default "default".
	Namespace string
	// TLS dials over TLS, verifying the server against the system's roots.
	// Implied by every TLS* setting below and by APIKey. Default false
	// (plaintext, for a local server).
	TLS bool
	// TLSCA is a PEM file of the CAs that verify Temporal's certificate
	// instead of the system's roots, read when the client is dialled.
	// Default: none.
	TLSCA string
	// TLSCert is a PEM file of a client certificate for mTLS, with TLSKey:
	// set both or neither. Read when the client is dialled. Default: none.
	TLSCert string
	// TLSKey is the PEM file of TLSCert's key. Default: none.
	TLSKey string
	// TLSServerName is the name expected in Temporal's certificate.
	// Default: the host of the address.
	TLSServerName string
	// APIKey is sent as a bearer token (Temporal Cloud API keys), always
	// over TLS. A secret: never printed. Default: none.
	APIKey string
	// CodecKeys turn on the payload codec (package codec): every payload
	// the client writes into Temporal is encrypted with AES-256-GCM. Each
	// entry is "ID:BASE64" or "BASE64" of 32 bytes, several may be
	// comma-separated; the first encrypts, every one decrypts. Secrets:
	// never printed. Default: none (payloads in clear).
	CodecKeys []string
	// ConnectTimeout bounds dialling and the frontend's first answer.
	// Default 10s.
	ConnectTimeout time.Duration
}

// WithDefaults fills the zero fields and checks the values, by value (the
// TLS files are read when the client is dialled). Errors are *FieldError.
func (c TemporalConfig) WithDefaults() (TemporalConfig, error) {
	c.Address = cmp.Or(c.Address, DefaultTemporalAddress)
	c.Namespace = cmp.Or(c.Namespace, client.DefaultNamespace)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, DefaultConnectTimeout)
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return c, fieldErr("TemporalConfig.TLSCert", "and TemporalConfig.TLSKey: set both for mTLS, or neither")
	case c.ConnectTimeout < 0:
		return c, fieldErr("TemporalConfig.ConnectTimeout", "must be positive, got %s", c.ConnectTimeout)
	}
	if _, err := parseCodecKeys(c.CodecKeys); err != nil {
		return c, &FieldError{Field: "TemporalConfig.CodecKeys", Problem: err.Error()}
	}
	return c, nil
}

// parseCodecKeys reads codec keys, "ID:BASE64" or "BASE64" of 32 bytes,
// each entry possibly comma-separated; the first encrypts. Errors give the
// key's position, never a key. None: nil.
func parseCodecKeys(specs []string) ([]codec.Key, error) {
	var keys []codec.Key
	for _, spec := range specs {
		for _, s := range strings.Split(spec, ",") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			k, err := codec.ParseKey(s)
			if err != nil {
				return nil, fmt.Errorf("key %d: %w", len(keys)+1, err)
			}
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// Codec is the payload codec of CodecKeys, for a codec server of your own
// (codec.Handler); nil without keys.
func (c TemporalConfig) Codec() (*codec.Codec, error) {
	keys, err := parseCodecKeys(c.CodecKeys)
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	cdc, err := codec.New(keys)
	if err != nil {
		return nil, &FieldError{Field: "TemporalConfig.CodecKeys", Problem: err.Error()}
	}
	return cdc, nil
}

// Dial dials the frontend (with TLS, mTLS and an API key when configured,
// and the payload codec when keys are set) and checks that it answers. The
// caller closes the client; workers built on it share its codec and its
// interceptors.
func (c TemporalConfig) Dial(ctx context.Context, logger *slog.Logger, interceptors ...interceptor.ClientInterceptor) (client.Client, error) {
	return c.dial(ctx, logger, nil, interceptors...)
}

// dial is Dial with a handler for the Temporal SDK's metrics (nil: none),
// which workers built on the client share.
func (c TemporalConfig) dial(ctx context.Context, logger *slog.Logger, mh client.MetricsHandler, interceptors ...interceptor.ClientInterceptor) (client.Client, error) {
	c, err := c.WithDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	defer cancel()
	conn, creds, err := c.connection()
	if err != nil {
		return nil, err
	}
	opts := client.Options{
		HostPort:          c.Address,
		Namespace:         c.Namespace,
		Logger:            sdklog.NewStructuredLogger(sdkLogger(cmp.Or(logger, slog.Default()))),
		ConnectionOptions: conn,
		Credentials:       creds,
		Interceptors:      interceptors,
		MetricsHandler:    mh,
	}
	cdc, err := c.Codec()
	if err != nil {
		return nil, err
	}
	if cdc != nil {
		codec.ClientOptions(cdc, &opts)
	}
	cl, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Temporal at %s (namespace %q): %s\n  Is a Temporal server running there? `ferry dev` starts an embedded one; set TemporalConfig.Address to point elsewhere",
			c.Address, c.Namespace, shortErr(err))
	}
	return cl, nil
}

// tlsEnabled: any TLS setting, or an API key (which the SDK never sends in
// plaintext unless told to, and Ferry never tells it to).
func (c TemporalConfig) tlsEnabled() bool {
	return c.TLS || c.TLSCA != "" || c.TLSCert != "" || c.TLSKey != "" || c.TLSServerName != "" || c.APIKey != ""
}

// connection turns the TLS and API key settings into the SDK's connection
// options. Files are read here, at dial time, so a restart picks up rotated
// certificates.
func (c TemporalConfig) connection() (client.ConnectionOptions, client.Credentials, error) {
	var opts client.ConnectionOptions
	if !c.tlsEnabled() {
		return opts, nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName}
	if tc.ServerName == "" {
		if host, _, err := net.SplitHostPort(c.Address); err == nil {
			tc.ServerName = host
		}
	}
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return opts, nil, fieldErr("TemporalConfig.TLSCA", "cannot be read: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return opts, nil, fieldErr("TemporalConfig.TLSCA", "%s: no PEM certificate in it", c.TLSCA)
		}
		tc.RootCAs = pool
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			// The error names the files, never their contents.
			return opts, nil, fieldErr("TemporalConfig.TLSCert", "and TemporalConfig.TLSKey: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	opts.TLS = tc
	var creds client.Credentials
	if c.APIKey != "" {
		creds = client.NewAPIKeyStaticCredentials(c.APIKey)
	}
	return opts, creds, nil
}

const hidden = "xxxxx"

// String prints the settings with the password hidden.
func (c PostgresConfig) String() string {
	return fmt.Sprintf("{URL:%s ConnectTimeout:%s}", redactURL(c.URL), c.ConnectTimeout)
}

// Redacted returns a copy that is safe to print: the API key and the codec
// keys are replaced by xxxxx.
func (c TemporalConfig) Redacted() TemporalConfig {
	if c.APIKey != "" {
		c.APIKey = hidden
	}
	if len(c.CodecKeys) > 0 {
		c.CodecKeys = []string{hidden}
	}
	return c
}

// String prints the redacted settings, so that %v and %+v never show a
// secret.
func (c TemporalConfig) String() string {
	type plain TemporalConfig // no String method: no recursion
	return fmt.Sprintf("%+v", plain(c.Redacted()))
}

// Redacted returns a copy that is safe to print: the AMQP password and the
// payment provider's API key are replaced by xxxxx.
func (c Config) Redacted() Config {
	c.filled = nil // nothing to print, and a copy with a secret
	c.AMQPURL = redactURL(c.AMQPURL)
	if c.Effects.PaymentsAPIKey != "" {
		c.Effects.PaymentsAPIKey = hidden
	}
	return c
}

// String prints the redacted settings.
func (c Config) String() string {
	type plain Config
	return fmt.Sprintf("%+v", plain(c.Redacted()))
}

// LogValue makes slog print the redacted settings.
func (c Config) LogValue() slog.Value {
	r := c.Redacted()
	return slog.GroupValue(
		slog.String("task_queue", r.TaskQueue),
		slog.String("namespace", r.Namespace),
		slog.String("amqp_url", r.AMQPURL),
		slog.String("exchange", r.Exchange),
		slog.Int("max_message_bytes", r.MaxMessageBytes),
		slog.String("routing_key", r.RoutingKey),
		slog.Int("batch_size", r.BatchSize),
		slog.Duration("lease", r.Lease),
		slog.Duration("poll_interval", r.PollInterval),
		slog.Duration("idle_timeout", r.IdleTimeout),
		slog.String("start_mode", r.StartMode),
		slog.String("source", r.Source),
		slog.Duration("connect_timeout", r.ConnectTimeout),
	)
}

// LogValue makes slog print the settings with the password hidden.
func (c PostgresConfig) LogValue() slog.Value {
	return slog.GroupValue(slog.String("url", redactURL(c.URL)), slog.Duration("connect_timeout", c.ConnectTimeout))
}

// LogValue makes slog print the redacted settings.
func (c TemporalConfig) LogValue() slog.Value {
	r := c.Redacted()
	return slog.GroupValue(
		slog.String("address", r.Address),
		slog.String("namespace", r.Namespace),
		slog.Bool("tls", r.tlsEnabled()),
		slog.String("tls_ca", r.TLSCA),
		slog.String("tls_cert", r.TLSCert),
		slog.String("tls_server_name", r.TLSServerName),
		slog.String("api_key", r.APIKey),
		slog.Bool("payload_codec", len(r.CodecKeys) > 0),
	)
}

// sdkLogger keeps the Temporal SDK to warnings and errors: its info lines
// (every worker start, every poll) bury what Ferry says.
func sdkLogger(l *slog.Logger) *slog.Logger {
	return slog.New(minLevel{l.Handler(), slog.LevelWarn})
}

type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(a), h.min}
}
func (h minLevel) WithGroup(n string) slog.Handler { return minLevel{h.Handler.WithGroup(n), h.min} }

func redactURL(raw string) string { return broker.Redact(raw) }

// shortErr keeps the innermost, most specific part of a dial error.
func shortErr(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i > 0 && len(s)-i < 120 && strings.Contains(s, "dial") {
		s = s[i+2:]
	}
	return strings.Trim(s, `"`)
}
