package app

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/internal/telemetry"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/walrelay"
	"github.com/ferry-outbox/ferry/workflows"
)

// Config is everything a Ferry process needs. The CLI fills it from flags
// and FERRY_* environment variables (see README, Configuration).
type Config struct {
	// PostgresURL; default postgres://postgres@127.0.0.1:5432/postgres.
	PostgresURL string
	// AMQPURL; default amqp://guest:guest@127.0.0.1:5672/.
	AMQPURL string
	// TemporalAddress host:port of the frontend; default 127.0.0.1:7233.
	TemporalAddress string
	// Namespace; default "default".
	Namespace string
	// TaskQueue of the aggregate workflows; default "ferry".
	TaskQueue string
	// Exchange events are published to; default "ferry.events".
	Exchange string
	// MaxMessageBytes is the largest payload published; a larger event is
	// quarantined (PayloadTooLarge) without being sent. Keep it at or below
	// RabbitMQ's max_message_size. Default 0: broker.DefaultMaxMessageBytes
	// (16 MiB, RabbitMQ 4's default).
	MaxMessageBytes int
	// RoutingKey template; default "{aggregate_type}.{event_type}".
	RoutingKey string
	// BatchSize of one claim; default 200.
	BatchSize int
	// PublishBatchSize is the most events an aggregate workflow publishes
	// in one fast-path local activity; -1 publishes one regular activity
	// per event. Default 0: workflows.DefaultPublishBatchSize (100).
	PublishBatchSize int
	// MaxBlockedRefs is the most event references a blocked aggregate
	// workflow keeps; the rows of the events signalled beyond it stay
	// pending in PostgreSQL until its repair. A worker setting
	// (worker.Config.Workflow), as are PublishBatchSize, IdleTimeout and
	// Policies: runs take them from their worker at their start.
	// -1: no bound. Default 0: workflows.DefaultMaxBlockedRefs (5,000).
	MaxBlockedRefs int
	// WorkflowTaskPollers of the worker; default 8 (worker.Config).
	WorkflowTaskPollers int
	// Lease of claimed rows; default 30s.
	Lease time.Duration
	// PollInterval, the fallback when no NOTIFY arrives; default 1s.
	PollInterval time.Duration
	// IdleTimeout after which an idle aggregate workflow completes (the
	// worker's); pollers use it as their signal window
	// (poller.Config.SignalWindow). Default 1m.
	IdleTimeout time.Duration
	// StartMode of aggregates not dispatched within IdleTimeout:
	// poller.StartOneShot (default: a run with the events in its input
	// that completes once they are published) or poller.StartKeepAlive.
	StartMode string
	// Source is where the poller role finds committed events: SourcePoll
	// (default: claims with FOR UPDATE SKIP LOCKED, woken by NOTIFY) or
	// SourceWAL (log tailing: a logical replication slot, package
	// walrelay; needs wal_level=logical and the REPLICATION attribute).
	Source string
	// WALSlot and WALPublication name SourceWAL's replication slot and
	// publication; default "ferry_outbox" each.
	WALSlot        string
	WALPublication string
	// WALCatchUpInterval is how often SourceWAL runs a claim pass for rows
	// the stream cannot deliver; default 30s.
	WALCatchUpInterval time.Duration
	// ConnectTimeout bounds reaching each dependency at start; default 10s.
	ConnectTimeout time.Duration
	// Policies of retries and poison handling by event type, "*" for the
	// rest. Default: workflows.DefaultMaxAttempts, then block the aggregate.
	Policies map[string]workflows.EventPolicy
	// MetricsAddress serves Prometheus /metrics when set (host:port).
	// Default: off.
	MetricsAddress string
	// Effects routes event types to effect workflows (payments, e-mail)
	// and configures them. Default: none.
	Effects EffectsConfig
	// RowRetention: delivered rows older than this are deleted by the
	// retention schedule. Default 720h (30 days).
	RowRetention time.Duration
	// PayloadRetention, when set and shorter than RowRetention, blanks the
	// payloads of older delivered rows (identity and timestamps stay).
	// Default 0: payloads live as long as rows.
	PayloadRetention time.Duration
	// NoSchedules: workers leave the retention and reconcile schedules
	// alone. Default false: every worker keeps them in place (idempotent).
	NoSchedules bool
	// DriftSample is how many of the most recently active aggregates each
	// reconcile run compares with their workflows' state. Default 0:
	// workflows.DefaultDriftSample (50); -1 turns the check off; at most
	// workflows.MaxDriftSample (1000).
	DriftSample int
	// OTelExporter sends Ferry's spans (ferry.dispatch, Temporal's workflow
	// and activity spans, ferry.publish) to an OpenTelemetry collector:
	// "otlp-grpc", "otlp-http", or "otlp" (the protocol named by
	// OTEL_EXPORTER_OTLP_PROTOCOL). Default "none": nothing is exported or
	// dialled, and spans go to the global tracer provider (a no-op unless
	// an embedding service set one).
	OTelExporter string
	// OTelEndpoint is the collector's base URL, e.g. http://collector:4318
	// (https:// for TLS). Default: the OTEL_EXPORTER_OTLP_* variables, else
	// localhost:4317 (gRPC) or localhost:4318 (HTTP).
	OTelEndpoint string
	// OTelServiceName is the service.name of Ferry's spans. Default
	// OTEL_SERVICE_NAME, else "ferry".
	OTelServiceName string

	// TemporalTLS dials Temporal over TLS, verifying the server against the
	// system's roots. Implied by every TemporalTLS* setting below and by
	// TemporalAPIKey. Default false (plaintext, for a local server).
	TemporalTLS bool
	// TemporalTLSCA is a PEM file of the CAs that verify Temporal's
	// certificate instead of the system's roots. Default: none.
	TemporalTLSCA string
	// TemporalTLSCert and TemporalTLSKey are PEM files of a client
	// certificate and its key, for mTLS. Set both or neither. Default: none.
	TemporalTLSCert string
	TemporalTLSKey  string
	// TemporalTLSServerName is the name expected in Temporal's certificate.
	// Default: the host of TemporalAddress.
	TemporalTLSServerName string
	// TemporalAPIKey is sent as a bearer token (Temporal Cloud API keys),
	// always over TLS. A secret: never printed. Default: none.
	TemporalAPIKey string

	// CodecKeys turn on the payload codec (package codec): every payload
	// Ferry writes into Temporal is encrypted with AES-256-GCM. Each entry
	// is "ID:BASE64" or "BASE64" of 32 bytes, several may be comma-separated;
	// the first encrypts, every one decrypts. Secrets: never printed.
	// Default: none (payloads in clear).
	CodecKeys []string
	// CodecKeyFile is a file of codec keys instead, one per line, the first
	// encrypts. Default: none.
	CodecKeyFile string
	// SensitiveFields name payload fields whose values Ferry masks in logs,
	// command output and error messages (package redact), as
	// [<aggregate_type>.<event_type>:]field-or.dotted.path entries, several
	// may be comma-separated. Default: none.
	SensitiveFields []string
}

// Defaults for this machine's local services.
const (
	DefaultPostgresURL     = "postgres://postgres@127.0.0.1:5432/postgres"
	DefaultAMQPURL         = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultTemporalAddress = "127.0.0.1:7233"
)

// Sources of the poller role (Config.Source).
const (
	SourcePoll = "poll"
	SourceWAL  = "wal"
)

// walConfig is the log-tailing relay's settings (without its dependencies).
func (c Config) walConfig() walrelay.Config {
	return walrelay.Config{Slot: c.WALSlot, Publication: c.WALPublication, CatchUpInterval: c.WALCatchUpInterval}
}

var taskQueueName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,200}$`)

// WithDefaults fills zero fields and validates the result.
func (c Config) WithDefaults() (Config, error) {
	c.PostgresURL = cmp.Or(c.PostgresURL, DefaultPostgresURL)
	c.AMQPURL = cmp.Or(c.AMQPURL, DefaultAMQPURL)
	c.TemporalAddress = cmp.Or(c.TemporalAddress, DefaultTemporalAddress)
	c.Namespace = cmp.Or(c.Namespace, "default")
	c.TaskQueue = cmp.Or(c.TaskQueue, "ferry")
	c.Exchange = cmp.Or(c.Exchange, "ferry.events")
	c.RoutingKey = cmp.Or(c.RoutingKey, activities.DefaultRoutingKeyTemplate)
	if _, err := activities.RoutingKeyTemplate(c.RoutingKey); err != nil {
		return c, err
	}
	c.BatchSize = cmp.Or(c.BatchSize, 200)
	c.Lease = cmp.Or(c.Lease, 30*time.Second)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, 10*time.Second)
	c.RowRetention = cmp.Or(c.RowRetention, workflows.DefaultRowRetention)
	if c.RowRetention < time.Hour {
		return c, fmt.Errorf("retention %s: must be at least 1h (delivered rows are kept that long)", c.RowRetention)
	}
	if !taskQueueName.MatchString(c.TaskQueue) {
		return c, fmt.Errorf("task queue %q: use 1-200 letters, digits, '_', '.', ':' or '-'", c.TaskQueue)
	}
	if c.BatchSize < 1 {
		return c, errors.New("batch size must be at least 1")
	}
	c.StartMode = cmp.Or(c.StartMode, poller.StartOneShot)
	if c.StartMode != poller.StartOneShot && c.StartMode != poller.StartKeepAlive {
		return c, fmt.Errorf("start mode %q: use %s or %s", c.StartMode, poller.StartOneShot, poller.StartKeepAlive)
	}
	if c.PublishBatchSize < -1 || c.PublishBatchSize > 1000 {
		return c, fmt.Errorf("publish batch size %d: use 1 to 1000, 0 for the default, or -1 for one activity per event", c.PublishBatchSize)
	}
	if c.MaxBlockedRefs < -1 {
		return c, fmt.Errorf("max blocked refs %d: use at least 1, 0 for the default (%d), or -1 for no bound", c.MaxBlockedRefs, workflows.DefaultMaxBlockedRefs)
	}
	if c.DriftSample < -1 || c.DriftSample > workflows.MaxDriftSample {
		return c, fmt.Errorf("drift sample %d: use 1 to %d aggregates, 0 for the default (%d), or -1 for no drift check",
			c.DriftSample, workflows.MaxDriftSample, workflows.DefaultDriftSample)
	}
	if c.WorkflowTaskPollers != 0 && c.WorkflowTaskPollers < 2 {
		return c, fmt.Errorf("workflow task pollers %d: must be at least 2", c.WorkflowTaskPollers)
	}
	c.OTelExporter = cmp.Or(c.OTelExporter, telemetry.ExporterNone)
	if _, err := c.telemetry().WithDefaults(); err != nil {
		return c, err
	}
	// Checked here, filled where the worker builds them (WorkerEffects).
	if _, err := c.Effects.withDefaults(); err != nil {
		return c, err
	}
	if err := c.validateTemporalTLS(); err != nil {
		return c, err
	}
	if _, err := c.Codec(); err != nil {
		return c, err
	}
	if _, err := c.Redactor(); err != nil {
		return c, err
	}
	// The broker's checks of the URL's scheme, the exchange name and the
	// message size limit, without dialling.
	if _, err := broker.New(broker.Config{URL: c.AMQPURL, Exchange: c.Exchange, MaxMessageBytes: c.MaxMessageBytes}); err != nil {
		return c, err
	}
	c.Source = cmp.Or(c.Source, SourcePoll)
	if c.Source != SourcePoll && c.Source != SourceWAL {
		return c, fmt.Errorf("source %q: use %s (claim pending rows) or %s (tail the write-ahead log)", c.Source, SourcePoll, SourceWAL)
	}
	c.WALSlot = cmp.Or(c.WALSlot, walrelay.DefaultSlot)
	c.WALPublication = cmp.Or(c.WALPublication, walrelay.DefaultPublication)
	c.WALCatchUpInterval = cmp.Or(c.WALCatchUpInterval, 30*time.Second)
	if err := c.walConfig().Validate(); err != nil {
		return c, err
	}
	// The poller's own checks, before anything is dialled.
	if err := (poller.Config{BatchSize: c.BatchSize, Lease: c.Lease, PollInterval: c.PollInterval}).Validate(); err != nil {
		return c, err
	}
	return c, nil
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
