package settings

import (
	"fmt"
	"strings"
	"time"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/effects/email"
	"github.com/ferry-outbox/ferry/effects/payment"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/walrelay"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
	"go.temporal.io/sdk/client"
)

// Owner is the component that reads a setting: the one place it takes
// effect.
type Owner string

// Owners, in the order the reference lists them.
const (
	// OwnerPostgres: ferry.PostgresConfig (the ferry.Postgres module and
	// every command that opens a pool).
	OwnerPostgres Owner = "postgres"
	// OwnerTemporal: ferry.TemporalConfig (the ferry.Temporal module and
	// every command that dials Temporal).
	OwnerTemporal Owner = "temporal"
	// OwnerRelay: ferry.Config, read by the poller and the worker alike.
	OwnerRelay Owner = "relay"
	// OwnerPoller: ferry.Config, read by the poller role only.
	OwnerPoller Owner = "poller"
	// OwnerWorker: ferry.Config, read by the worker role only (its
	// publisher, its activities, the workflows it hosts, its schedules and
	// effects).
	OwnerWorker Owner = "worker"
	// OwnerProcess: settings of the ferry binary only (not on any library
	// config): its logs, its /metrics listener, its trace exporter, its key
	// file and what it masks.
	OwnerProcess Owner = "process"
)

// Owners lists the owners in reference order.
var Owners = []Owner{OwnerPostgres, OwnerTemporal, OwnerRelay, OwnerPoller, OwnerWorker, OwnerProcess}

// Setting is one row of the table.
type Setting struct {
	// Name is the flag (without dashes) and the config-file key; "" for a
	// setting of the library only.
	Name string
	// Env is the environment variable; "" when there is none.
	Env string
	// Fields are the Go fields an embedding service sets, as
	// "Type.Field" of package ferry ("Config.BatchSize"); the first is
	// where the ferry command keeps the value (see Bind). Nil for a setting
	// of the ferry binary only.
	Fields []string
	// Bind is where the ferry command keeps a setting that is on no
	// library config: a field of its process configuration
	// (internal/app.Config), or "" when the command binds it itself
	// (log-level, config, policy).
	Bind string
	// Owner reads the setting.
	Owner Owner
	// Default is the typed default (string, int, bool, time.Duration or
	// []string): what a zero field becomes, and the flag's default.
	Default any
	// DefaultText, when set, is how the reference and the field's doc
	// comment show the default instead of Default's value.
	DefaultText string
	// Usage is the one-line help of the flag.
	Usage string
	// Note adds detail to the reference that does not fit --help.
	Note string
	// Applies says when a change takes effect; "" means when the process
	// starts.
	Applies string
	// Secret settings are never printed: --help shows a default taken from
	// the environment as xxxxx.
	Secret bool
	// Repeatable flags take several values; Sep separates them in the
	// environment variable and the config file.
	Repeatable bool
	Sep        string
}

// Defaults of the ferry binary's own settings; every other default is the
// constant of the package that owns the setting (package ferry's, or a
// component's: poller.DefaultBatchSize, …), which the table names.
const (
	DefaultOTelExporter    = "none"
	DefaultOTelServiceName = "ferry"
	DefaultLogLevel        = "info"
)

// Applies-when texts shared by several settings.
const (
	appliesWorkflow = "on the workers: each aggregate workflow, running ones included, takes the worker's value at its next run or continue-as-new"
	appliesSchedule = "when a worker starts: it updates the schedule, whose next run uses it"
	appliesWorker   = "when a worker starts"
	appliesPoller   = "when a poller starts"
	appliesStart    = "when a worker or a poller starts"
)

// All is the table. Its order is the reference's within each owner.
var All = []Setting{
	// PostgreSQL.
	{Name: "postgres-url", Env: "FERRY_POSTGRES_URL", Fields: []string{"PostgresConfig.URL"}, Owner: OwnerPostgres,
		Default: ferry.DefaultPostgresURL, Usage: "PostgreSQL URL", Secret: true,
		Note: "libpq syntax; TLS in the URL (`sslmode=verify-full`, `sslrootcert=`); the password is never printed"},
	{Fields: []string{"PostgresConfig.ConnectTimeout"}, Owner: OwnerPostgres, Default: ferry.DefaultConnectTimeout,
		Usage: "bound of opening the pool and its first ping"},

	// Temporal.
	{Name: "temporal-address", Env: "FERRY_TEMPORAL_ADDRESS", Fields: []string{"TemporalConfig.Address"}, Owner: OwnerTemporal,
		Default: ferry.DefaultTemporalAddress, Usage: "Temporal frontend host:port"},
	{Name: "namespace", Env: "FERRY_TEMPORAL_NAMESPACE", Fields: []string{"TemporalConfig.Namespace", "Config.Namespace"}, Owner: OwnerTemporal,
		Default: client.DefaultNamespace, Usage: "Temporal namespace",
		Note: "the namespace the client dials; `Config.Namespace` tells the worker where to check Ferry's search attributes (the ferry command sets both)"},
	{Name: "temporal-tls", Env: "FERRY_TEMPORAL_TLS", Fields: []string{"TemporalConfig.TLS"}, Owner: OwnerTemporal, Default: false,
		Usage: "dial Temporal over TLS, verified against the system's roots; implied by the other --temporal-tls-* flags and --temporal-api-key"},
	{Name: "temporal-tls-ca", Env: "FERRY_TEMPORAL_TLS_CA", Fields: []string{"TemporalConfig.TLSCA"}, Owner: OwnerTemporal, Default: "",
		DefaultText: "none", Usage: "PEM file of the CAs that verify Temporal's certificate, instead of the system's roots",
		Note: "read when the client is dialled"},
	{Name: "temporal-tls-cert", Env: "FERRY_TEMPORAL_TLS_CERT", Fields: []string{"TemporalConfig.TLSCert"}, Owner: OwnerTemporal, Default: "",
		DefaultText: "none", Usage: "PEM file of the client certificate for mTLS; needs --temporal-tls-key",
		Note: "set both or neither; read when the client is dialled"},
	{Name: "temporal-tls-key", Env: "FERRY_TEMPORAL_TLS_KEY", Fields: []string{"TemporalConfig.TLSKey"}, Owner: OwnerTemporal, Default: "",
		DefaultText: "none", Usage: "PEM file of the client certificate's key for mTLS"},
	{Name: "temporal-tls-server-name", Env: "FERRY_TEMPORAL_TLS_SERVER_NAME", Fields: []string{"TemporalConfig.TLSServerName"}, Owner: OwnerTemporal,
		Default: "", DefaultText: "the host of the address", Usage: "name expected in Temporal's certificate; default: the host of --temporal-address"},
	{Name: "temporal-api-key", Env: "FERRY_TEMPORAL_API_KEY", Fields: []string{"TemporalConfig.APIKey"}, Owner: OwnerTemporal, Default: "",
		DefaultText: "none", Secret: true,
		Usage: "API key sent as a bearer token, always over TLS; prefer the environment or the config file to the command line, where other users can see it",
		Note:  "Temporal Cloud; never printed"},
	{Name: "codec-key", Env: "FERRY_CODEC_KEY", Fields: []string{"TemporalConfig.CodecKeys"}, Owner: OwnerTemporal, Default: []string(nil),
		DefaultText: "none (payloads in clear)", Secret: true, Repeatable: true, Sep: ",",
		Usage: "encrypt what Ferry writes into Temporal with AES-256-GCM: ID:BASE64 or BASE64 of 32 bytes (openssl rand -base64 32); the first encrypts, all decrypt; repeatable or comma-separated",
		Note:  "see [Privacy](operating.md#privacy)"},
	{Fields: []string{"TemporalConfig.ConnectTimeout"}, Owner: OwnerTemporal, Default: ferry.DefaultConnectTimeout,
		Usage: "bound of dialling Temporal and its first answer"},

	// Both roles.
	{Name: "task-queue", Env: "FERRY_TASK_QUEUE", Fields: []string{"Config.TaskQueue"}, Owner: OwnerRelay, Default: workflows.DefaultTaskQueue,
		Usage: "Temporal task queue of the aggregate workflows", Note: "1-200 letters, digits, `_`, `.`, `:` or `-`; the same on pollers and workers"},

	// Poller.
	{Name: "batch-size", Env: "FERRY_BATCH_SIZE", Fields: []string{"Config.BatchSize"}, Owner: OwnerPoller, Default: poller.DefaultBatchSize,
		Usage: "oldest rows per claim; a claim adds up to 4x as many later rows of the same aggregates", Note: "1–10,000", Applies: appliesPoller},
	{Name: "lease", Env: "FERRY_LEASE", Fields: []string{"Config.Lease"}, Owner: OwnerPoller, Default: poller.DefaultLease,
		Usage: "lease of claimed rows", Note: "must exceed the signal timeout (5s) + the mark timeout (5s)", Applies: appliesPoller},
	{Name: "poll-interval", Env: "FERRY_POLL_INTERVAL", Fields: []string{"Config.PollInterval"}, Owner: OwnerPoller, Default: poller.DefaultPollInterval,
		Usage: "fallback poll interval when no NOTIFY arrives", Note: "at least 10ms", Applies: appliesPoller},
	{Name: "start-mode", Env: "FERRY_START_MODE", Fields: []string{"Config.StartMode"}, Owner: OwnerPoller, Default: poller.DefaultStartMode,
		Usage:   "aggregates not dispatched within --idle-timeout: one-shot (a run with the events in its input, done once they are published) or keep-alive (a run that idles --idle-timeout)",
		Applies: appliesPoller},
	{Name: "lane", Env: "FERRY_LANE", Fields: []string{"Config.Lane"}, Owner: OwnerPoller, Default: poller.DefaultLane,
		Usage: "how events are delivered: workflow (every event through its aggregate's workflow) or publish-first (the poller publishes to RabbitMQ itself and hands an aggregate to its workflow only when a publish fails, an event needs the workflow or an operator repairs it)",
		Note:  "every poller of one outbox runs the same lane (a poller of the other lane is refused at start); see [Lanes](lanes.md#lanes)", Applies: appliesPoller},
	{Name: "source", Env: "FERRY_SOURCE", Fields: []string{"Config.Source"}, Owner: OwnerPoller, Default: ferry.SourcePoll,
		Usage: "where the poller finds committed events: poll (claim pending rows) or wal (tail the write-ahead log through a logical replication slot; needs wal_level=logical and REPLICATION)",
		Note:  "see [Polling or log tailing](log-tailing.md#polling-or-log-tailing)", Applies: appliesPoller},
	{Name: "wal-slot", Env: "FERRY_WAL_SLOT", Fields: []string{"Config.WALSlot"}, Owner: OwnerPoller, Default: walrelay.DefaultSlot,
		Usage: "replication slot of --source wal; one per outbox, slots are cluster-wide", Note: "`^[a-z_][a-z0-9_]{0,62}$`", Applies: appliesPoller},
	{Name: "wal-publication", Env: "FERRY_WAL_PUBLICATION", Fields: []string{"Config.WALPublication"}, Owner: OwnerPoller, Default: walrelay.DefaultPublication,
		Usage: "publication of --source wal", Note: "`^[a-z_][a-z0-9_]{0,62}$`", Applies: appliesPoller},
	{Name: "wal-catch-up-interval", Env: "FERRY_WAL_CATCH_UP_INTERVAL", Fields: []string{"Config.WALCatchUpInterval"}, Owner: OwnerPoller,
		Default: walrelay.DefaultCatchUpInterval, Usage: "--source wal: how often a claim pass delivers rows the stream cannot",
		Note: "at least 1s; the pass also runs at start and after the slot was recreated", Applies: appliesPoller},

	// Both roles: the broker. Workers publish with it, and so do the
	// pollers of the publish-first lane.
	{Name: "amqp-url", Env: "FERRY_AMQP_URL", Fields: []string{"Config.AMQPURL"}, Owner: OwnerRelay, Default: ferry.DefaultAMQPURL,
		Usage: "RabbitMQ URL", Secret: true, Applies: appliesStart,
		Note: "`amqp://` or `amqps://` (TLS in the URL: `cacertfile=`, `certfile=`, `keyfile=`); the password is never printed; pollers read it with `--lane publish-first`"},
	{Name: "exchange", Env: "FERRY_EXCHANGE", Fields: []string{"Config.Exchange"}, Owner: OwnerRelay, Default: broker.DefaultExchange,
		Usage: "RabbitMQ topic exchange", Note: "1-255 letters, digits, `_`, `.`, `:` or `-`; the same on workers and pollers", Applies: appliesStart},
	{Name: "routing-key", Env: "FERRY_ROUTING_KEY", Fields: []string{"Config.RoutingKey"}, Owner: OwnerRelay, Default: rabbitmq.DefaultRoutingKeyTemplate,
		Usage: "routing key template: {aggregate_type}, {event_type} and plain text", Note: "the same on workers and pollers", Applies: appliesStart},
	{Name: "max-message-size", Env: "FERRY_MAX_MESSAGE_SIZE", Fields: []string{"Config.MaxMessageBytes"}, Owner: OwnerRelay,
		Default: broker.DefaultMaxMessageBytes, DefaultText: "16 MiB",
		Usage: "largest payload in bytes published; a larger event is quarantined unsent; keep it at or below RabbitMQ's max_message_size",
		Note:  "at most 512 MiB; see [Messages on RabbitMQ](consuming.md#messages-on-rabbitmq)", Applies: appliesStart},
	{Fields: []string{"Config.ConnectTimeout"}, Owner: OwnerRelay, Default: ferry.DefaultConnectTimeout,
		Usage: "bound of New's Start connecting to RabbitMQ"},
	{Name: "workflow-task-pollers", Env: "FERRY_WORKFLOW_TASK_POLLERS", Fields: []string{"Config.WorkflowTaskPollers"}, Owner: OwnerWorker,
		Default: worker.DefaultWorkflowTaskPollers, Usage: "worker's concurrent polls for workflow tasks", Note: "at least 2", Applies: appliesWorker},

	// Worker: what the workflows it hosts read.
	{Name: "publish-batch-size", Env: "FERRY_PUBLISH_BATCH_SIZE", Fields: []string{"Config.PublishBatchSize"}, Owner: OwnerWorker,
		Default: workflows.DefaultPublishBatchSize, Usage: "events per fast-path publish of an aggregate workflow; -1: one activity per event",
		Note: "1–1,000, or -1", Applies: appliesWorkflow},
	{Name: "idle-timeout", Env: "FERRY_IDLE_TIMEOUT", Fields: []string{"Config.IdleTimeout"}, Owner: OwnerWorker, Default: workflows.DefaultIdleTimeout,
		Usage: "an idle aggregate workflow completes after this",
		Note:  "the poller also reads it: an aggregate it dispatched within it gets Signal-With-Start, others --start-mode", Applies: appliesWorkflow},
	{Name: "policy", Env: "FERRY_POLICY", Fields: []string{"Config.Policies"}, Owner: OwnerWorker, Default: []string(nil),
		DefaultText: fmt.Sprintf("%d attempts, then block", workflows.DefaultMaxAttempts), Repeatable: true, Sep: ";",
		Usage: "retries and poison handling of an event type, TYPE:max-attempts=N,on-poison=block|skip; TYPE * for the rest",
		Note:  "see [Poison events](operating.md#poison-events-quarantine-and-repair)", Applies: appliesWorkflow},
	{Name: "max-blocked-refs", Env: "FERRY_MAX_BLOCKED_REFS", Fields: []string{"Config.MaxBlockedRefs"}, Owner: OwnerWorker,
		Default: workflows.DefaultMaxBlockedRefs, Usage: "event references a blocked aggregate workflow keeps; later events wait in PostgreSQL for its repair; -1: no bound",
		Note: "see [Poison events](operating.md#poison-events-quarantine-and-repair)", Applies: appliesWorkflow},
	{Fields: []string{"workflows.Settings.MaxHistoryEvents"}, Owner: OwnerWorker, Default: workflows.DefaultMaxHistoryEvents,
		Usage: "history length at which an aggregate workflow continues as new", Applies: appliesWorkflow},

	// Worker: its schedules.
	{Name: "retention", Env: "FERRY_RETENTION", Fields: []string{"Config.RowRetention"}, Owner: OwnerWorker, Default: workflows.DefaultRowRetention,
		Usage: "delivered rows older than this are deleted by the retention schedule", Note: "at least 1h", Applies: appliesSchedule},
	{Name: "payload-retention", Env: "FERRY_PAYLOAD_RETENTION", Fields: []string{"Config.PayloadRetention"}, Owner: OwnerWorker, Default: time.Duration(0),
		DefaultText: "0 (keep)", Usage: "blank payloads of delivered rows older than this, keeping identity and timestamps; 0: keep", Applies: appliesSchedule},
	{Name: "drift-sample", Env: "FERRY_DRIFT_SAMPLE", Fields: []string{"Config.DriftSample"}, Owner: OwnerWorker, Default: workflows.DefaultDriftSample,
		Usage: "aggregates each reconcile run compares with their workflows; -1: no drift check", Note: fmt.Sprintf("at most %d", workflows.MaxDriftSample),
		Applies: appliesSchedule},
	{Name: "no-schedules", Env: "FERRY_NO_SCHEDULES", Fields: []string{"Config.NoSchedules"}, Owner: OwnerWorker, Default: false,
		Usage: "workers leave the retention and reconcile schedules alone", Applies: appliesWorker},

	// Worker: workflow destinations.
	{Name: "destination", Env: "FERRY_DESTINATIONS", Fields: []string{"Config.Destinations"}, Owner: OwnerWorker, Default: []string(nil), DefaultText: "none",
		Repeatable: true, Sep: ";", Usage: "start or signal a workflow of yours for an event type, TYPE=ACTION:NAME[,key=value…], e.g. order.created=start:fulfilment,type=Fulfilment,queue=orders",
		Note: "see [Workflow destinations](workflow-destinations.md#workflow-destinations); pollers of `--lane publish-first` read it too: they hand such events to the aggregate's workflow", Applies: appliesStart},
	{Name: "no-broker", Env: "FERRY_NO_BROKER", Fields: []string{"Config.NoBroker"}, Owner: OwnerWorker, Default: false,
		Usage: "publish nothing to RabbitMQ and never connect to it: events go only to their workflow destinations",
		Note:  "needs --destination; an event type without one is quarantined (NoDestination); not with `--lane publish-first`, which publishes to RabbitMQ", Applies: appliesWorker},

	// Worker: effects.
	{Name: "effect", Env: "FERRY_EFFECTS", Fields: []string{"EffectsConfig.Routes"}, Owner: OwnerWorker, Default: []string(nil), DefaultText: "none",
		Repeatable: true, Sep: ";", Usage: "effects of an event type, TYPE=EFFECT[,EFFECT…], e.g. order.created=charge,email:confirmation",
		Note: "see [Side effects](side-effects.md#side-effects); pollers of `--lane publish-first` read it too: they hand such events to the aggregate's workflow", Applies: appliesStart},
	{Name: "payments-url", Env: "FERRY_PAYMENTS_URL", Fields: []string{"EffectsConfig.PaymentsURL"}, Owner: OwnerWorker, Default: "", DefaultText: "none",
		Usage: "payment provider API for charge and refund effects", Note: "required when a route charges or refunds", Applies: appliesWorker},
	{Name: "payments-api-key", Env: "FERRY_PAYMENTS_API_KEY", Fields: []string{"EffectsConfig.PaymentsAPIKey"}, Owner: OwnerWorker, Default: "",
		DefaultText: "none", Secret: true, Usage: "payment provider API key, sent as a bearer token; prefer the environment or the config file", Applies: appliesWorker},
	{Name: "payments-timeout", Env: "FERRY_PAYMENTS_TIMEOUT", Fields: []string{"EffectsConfig.PaymentsTimeout"}, Owner: OwnerWorker,
		Default: payment.DefaultTimeout, Usage: "timeout of one request to the payment provider", Note: "shorter than --payment-attempt-timeout", Applies: appliesWorker},
	{Name: "payment-amount-field", Env: "FERRY_PAYMENT_AMOUNT_FIELD", Fields: []string{"EffectsConfig.PaymentAmountField"}, Owner: OwnerWorker,
		Default: payment.DefaultAmountField, Usage: "payload field with the amount in minor units", Applies: appliesWorker},
	{Name: "payment-escalate-after", Env: "FERRY_PAYMENT_ESCALATE_AFTER", Fields: []string{"EffectsConfig.PaymentEscalateAfter"}, Owner: OwnerWorker,
		Default: effects.DefaultEscalateAfter, Usage: "a payment whose outcome stays unknown this long blocks for an operator",
		Note: "less than half the provider's 24h key retention", Applies: appliesWorker},
	{Name: "payment-attempt-timeout", Env: "FERRY_PAYMENT_ATTEMPT_TIMEOUT", Fields: []string{"EffectsConfig.PaymentAttemptTimeout"}, Owner: OwnerWorker,
		Default: effects.DefaultAttemptTimeout, Usage: "bound of one payment send attempt; after a worker died the next attempt starts after it", Applies: appliesWorker},
	{Name: "smtp-address", Env: "FERRY_SMTP_ADDRESS", Fields: []string{"EffectsConfig.SMTPAddress"}, Owner: OwnerWorker, Default: "", DefaultText: "none",
		Usage: "SMTP server host:port for e-mail effects", Note: "required when a route sends e-mail", Applies: appliesWorker},
	{Name: "smtp-from", Env: "FERRY_SMTP_FROM", Fields: []string{"EffectsConfig.SMTPFrom"}, Owner: OwnerWorker, Default: ferry.DefaultSMTPFrom,
		Usage: "sender address of e-mail effects", Applies: appliesWorker},
	{Name: "email-ambiguous", Env: "FERRY_EMAIL_AMBIGUOUS", Fields: []string{"EffectsConfig.EmailAmbiguous"}, Owner: OwnerWorker, Default: email.PolicyResend,
		Usage: "after a drop following the final '.': resend (same Message-ID) or park for an operator", Applies: appliesWorker},

	// The ferry binary's own.
	{Name: "log-level", Env: "FERRY_LOG_LEVEL", Owner: OwnerProcess, Default: DefaultLogLevel, Usage: "debug, info, warn or error"},
	{Name: "config", Env: "FERRY_CONFIG", Owner: OwnerProcess, Default: "", DefaultText: "none",
		Usage: "YAML file of settings keyed by flag name; flags and FERRY_* variables override it"},
	{Name: "metrics-address", Env: "FERRY_METRICS_ADDRESS", Bind: "MetricsAddress", Owner: OwnerProcess, Default: "", DefaultText: "off",
		Usage: "serve Prometheus /metrics on host:port; empty: off",
		Note:  "an embedding service serves Ferry's metrics on its own /metrics (ferry.Metrics, Deps.Metrics)"},
	{Name: "temporal-ui-url", Env: "FERRY_TEMPORAL_UI_URL", Bind: "TemporalUIURL", Owner: OwnerProcess, Default: "", DefaultText: "none",
		Usage: "base URL of the Temporal Web UI, e.g. http://127.0.0.1:8233; ferry event links an event's workflow there; empty: it prints the temporal CLI command instead",
		Note:  "http or https; the UI's own address, without /namespaces/…"},
	{Name: "otel-exporter", Env: "FERRY_OTEL_EXPORTER", Bind: "OTelExporter", Owner: OwnerProcess, Default: DefaultOTelExporter,
		Usage: "export traces: none, otlp-grpc, otlp-http, or otlp (protocol from OTEL_EXPORTER_OTLP_PROTOCOL)",
		Note:  "see [Tracing](operating.md#tracing); an embedding service brings its own trace.TracerProvider"},
	{Name: "otel-endpoint", Env: "FERRY_OTEL_ENDPOINT", Bind: "OTelEndpoint", Owner: OwnerProcess, Default: "",
		DefaultText: "the `OTEL_EXPORTER_OTLP_*` variables, else localhost", Usage: "OTLP collector URL such as http://collector:4318; empty: OTEL_EXPORTER_OTLP_ENDPOINT, else localhost"},
	{Name: "otel-service-name", Env: "OTEL_SERVICE_NAME", Bind: "OTelServiceName", Owner: OwnerProcess, Default: DefaultOTelServiceName,
		Usage: "service.name of Ferry's spans"},
	{Name: "codec-key-file", Env: "FERRY_CODEC_KEY_FILE", Bind: "CodecKeyFile", Owner: OwnerProcess, Default: "", DefaultText: "none",
		Usage: "file of codec keys instead, one per line, the first encrypts",
		Note:  "read when the codec is built (dialling Temporal, `ferry codec-server`), so a restart picks up a rotated file; an embedding service sets `TemporalConfig.CodecKeys`"},
	{Name: "sensitive-field", Env: "FERRY_SENSITIVE_FIELDS", Bind: "SensitiveFields", Owner: OwnerProcess, Default: []string(nil), DefaultText: "none",
		Repeatable: true, Sep: ",",
		Usage: "payload field whose values are masked in logs, output and errors: a name (any depth), a dotted path, optionally after <aggregate_type>.<event_type>:; repeatable or comma-separated",
		Note:  "see [Privacy](operating.md#privacy)"},
}

// ByName is the setting whose flag is name.
func ByName(name string) (Setting, bool) {
	for _, s := range All {
		if s.Name != "" && s.Name == name {
			return s, true
		}
	}
	return Setting{}, false
}

// ByField is the setting a Go field ("Config.BatchSize") belongs to.
func ByField(field string) (Setting, bool) {
	for _, s := range All {
		for _, f := range s.Fields {
			if f == field {
				return s, true
			}
		}
	}
	return Setting{}, false
}

// Flags are the settings the ferry command has flags for.
func Flags() []Setting {
	var out []Setting
	for _, s := range All {
		if s.Name != "" {
			out = append(out, s)
		}
	}
	return out
}

// HelpUsage is the flag's --help text: Usage and the environment variable,
// "(FERRY_X)" or, for a repeatable flag, "(repeatable; FERRY_X,
// ';'-separated)" (internal/configfile reads the variable's name from it).
func (s Setting) HelpUsage() string {
	switch {
	case s.Env == "":
		return s.Usage
	case s.Repeatable && s.Sep == ";":
		return fmt.Sprintf("%s (repeatable; %s, ';'-separated)", s.Usage, s.Env)
	}
	return fmt.Sprintf("%s (%s)", s.Usage, s.Env)
}

// DefaultString is the default as the reference shows it.
func (s Setting) DefaultString() string {
	if s.DefaultText != "" {
		return s.DefaultText
	}
	switch v := s.Default.(type) {
	case string:
		if v == "" {
			return "none"
		}
		return v
	case []string:
		if len(v) == 0 {
			return "none"
		}
		return strings.Join(v, s.Sep)
	case time.Duration:
		return FormatDuration(v)
	}
	return fmt.Sprint(s.Default)
}

// FormatDuration prints a duration as people write it: 30s, 1m, 720h.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
