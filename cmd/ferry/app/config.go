package app

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/cmd/ferry/internal/settings"
	"github.com/ferry-outbox/ferry/cmd/ferry/internal/tracing"
	"github.com/ferry-outbox/ferry/codec"
	"github.com/ferry-outbox/ferry/redact"
	"github.com/ferry-outbox/ferry/workflows"
)

// Config is everything a ferry process reads: the library's configs, each
// for the component that uses it, and the process's own settings, which no
// library config carries. The CLI fills it from the settings table
// (internal/settings): flags, FERRY_* variables and the config file.
type Config struct {
	// Config is the relay's: the poller's and the worker's settings.
	ferry.Config
	// Postgres is the pool's.
	Postgres ferry.PostgresConfig
	// Temporal is the client's. Its Namespace is also the relay's
	// (Config.Namespace): WithDefaults copies it there.
	Temporal ferry.TemporalConfig

	// MetricsAddress serves the process's Prometheus /metrics when set
	// (host:port). Default: off.
	MetricsAddress string
	// TemporalUIURL is the base URL of the Temporal Web UI
	// ("http://127.0.0.1:8233"), which `ferry event` links to. Default:
	// none (it prints the temporal CLI command instead).
	TemporalUIURL string
	// OTelExporter sends Ferry's spans to an OpenTelemetry collector:
	// "otlp-grpc", "otlp-http", or "otlp" (the protocol named by
	// OTEL_EXPORTER_OTLP_PROTOCOL). Default "none".
	OTelExporter string
	// OTelEndpoint is the collector's base URL. Default: the
	// OTEL_EXPORTER_OTLP_* variables, else localhost.
	OTelEndpoint string
	// OTelServiceName is the service.name of Ferry's spans. Default
	// OTEL_SERVICE_NAME, else "ferry".
	OTelServiceName string
	// CodecKeyFile is a file of codec keys instead of Temporal.CodecKeys,
	// one per line, the first encrypts; read when the codec is built.
	// Default: none.
	CodecKeyFile string
	// SensitiveFields name payload fields whose values the process masks in
	// logs, command output and error messages (package redact). Default:
	// none.
	SensitiveFields []string
}

// WithDefaults fills zero fields and checks every value, by value: no file
// is read (the key file is read when the codec is built) and nothing is
// dialled. Library errors are *ferry.FieldError, naming the Go field; the
// CLI shows the flag instead.
func (c Config) WithDefaults() (Config, error) {
	var err error
	if c.Temporal, err = c.Temporal.WithDefaults(); err != nil {
		return c, err
	}
	c.Config.Namespace = c.Temporal.Namespace
	if c.Config, err = c.Config.WithDefaults(); err != nil {
		return c, err
	}
	if c.Postgres, err = c.Postgres.WithDefaults(); err != nil {
		return c, err
	}
	// The relay's ConnectTimeout is the process's for every dependency.
	c.Postgres.ConnectTimeout = c.ConnectTimeout
	c.Temporal.ConnectTimeout = c.ConnectTimeout
	if c.TemporalUIURL, err = uiURL(c.TemporalUIURL); err != nil {
		return c, err
	}
	c.OTelExporter = cmp.Or(c.OTelExporter, settings.DefaultOTelExporter)
	if _, err := c.Telemetry().WithDefaults(); err != nil {
		return c, err
	}
	if len(c.Temporal.CodecKeys) > 0 && c.CodecKeyFile != "" {
		return c, fmt.Errorf("codec keys: set --codec-key (FERRY_CODEC_KEY) or --codec-key-file (FERRY_CODEC_KEY_FILE), not both")
	}
	if _, err := c.Redactor(); err != nil {
		return c, err
	}
	return c, nil
}

// uiURL checks the Temporal UI's base URL and drops a trailing slash; ""
// stays "".
func uiURL(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return "", fmt.Errorf("--temporal-ui-url (FERRY_TEMPORAL_UI_URL) %q: want the UI's base URL, http:// or https:// and a host, e.g. http://127.0.0.1:8233", raw)
	case u.User != nil, u.RawQuery != "", u.Fragment != "":
		return "", fmt.Errorf("--temporal-ui-url (FERRY_TEMPORAL_UI_URL) %q: want the UI's base URL, without user, query or fragment", raw)
	}
	return strings.TrimRight(raw, "/"), nil
}

// Telemetry is the trace exporter's settings.
func (c Config) Telemetry() tracing.Config {
	return tracing.Config{Exporter: c.OTelExporter, Endpoint: c.OTelEndpoint, ServiceName: c.OTelServiceName}
}

// TemporalWithKeys is Temporal with the keys of CodecKeyFile, which it
// reads now, so a restart picks up a rotated file. Errors name the file
// and the key's position, never a key.
func (c Config) TemporalWithKeys() (ferry.TemporalConfig, error) {
	t := c.Temporal
	if c.CodecKeyFile == "" {
		return t, nil
	}
	raw, err := os.ReadFile(c.CodecKeyFile)
	if err != nil {
		return t, fmt.Errorf("codec key file (--codec-key-file): %w", err)
	}
	t.CodecKeys = keyFileLines(raw)
	if len(t.CodecKeys) == 0 {
		return t, fmt.Errorf("codec key file %s (--codec-key-file) holds no key: one key per line, the first encrypts", c.CodecKeyFile)
	}
	if _, err := t.WithDefaults(); err != nil {
		return t, fmt.Errorf("codec key file %s (--codec-key-file): %s", c.CodecKeyFile, strings.TrimPrefix(err.Error(), "ferry: TemporalConfig.CodecKeys "))
	}
	return t, nil
}

// Codec builds the payload codec of the keys (Temporal.CodecKeys or
// CodecKeyFile, read now); nil when neither is set.
func (c Config) Codec() (*codec.Codec, error) {
	t, err := c.TemporalWithKeys()
	if err != nil {
		return nil, err
	}
	return t.Codec()
}

// keyFileLines are the non-empty lines of a key file that are not comments.
func keyFileLines(raw []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// Redactor builds the redactor of SensitiveFields; nil (redaction off)
// when none is named.
func (c Config) Redactor() (*redact.Redactor, error) {
	r, err := redact.New(c.SensitiveFields)
	if err != nil {
		return nil, fmt.Errorf("--sensitive-field (FERRY_SENSITIVE_FIELDS): %w", err)
	}
	return r, nil
}

// Redacted returns a copy that is safe to print: URL passwords, the API
// keys and the codec keys are replaced by xxxxx.
func (c Config) Redacted() Config {
	c.Config = c.Config.Redacted()
	c.Postgres.URL = broker.Redact(c.Postgres.URL)
	c.Temporal = c.Temporal.Redacted()
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
	return slog.GroupValue(
		slog.Any("relay", c.Config),
		slog.Any("postgres", c.Postgres),
		slog.Any("temporal", c.Temporal),
		slog.Bool("payload_codec", len(c.Temporal.CodecKeys) > 0 || c.CodecKeyFile != ""),
		slog.String("codec_key_file", c.CodecKeyFile),
		slog.Any("sensitive_fields", c.SensitiveFields),
		slog.String("metrics_address", c.MetricsAddress),
		slog.String("temporal_ui_url", c.TemporalUIURL),
		slog.String("otel_exporter", c.OTelExporter),
	)
}

// ParsePolicy reads one --policy value, "TYPE:max-attempts=N,on-poison=skip"
// (either setting may be left out; TYPE "*" is every other type).
func ParsePolicy(s string) (string, workflows.EventPolicy, error) {
	var p workflows.EventPolicy
	typ, settings, ok := strings.Cut(s, ":")
	if !ok || typ == "" || settings == "" {
		return "", p, fmt.Errorf("policy %q: use TYPE:max-attempts=N,on-poison=block|skip", s)
	}
	for _, kv := range strings.Split(settings, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "max-attempts":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				return "", p, fmt.Errorf("policy %q: max-attempts %q must be a whole number from 1 to 1000", s, v)
			}
			p.MaxAttempts = int32(n)
		case "on-poison":
			if v != workflows.OnPoisonBlock && v != workflows.OnPoisonSkip {
				return "", p, fmt.Errorf("policy %q: on-poison %q must be block or skip", s, v)
			}
			p.OnPoison = v
		default:
			return "", p, fmt.Errorf("policy %q: unknown setting %q (max-attempts, on-poison)", s, k)
		}
	}
	return typ, p, nil
}
