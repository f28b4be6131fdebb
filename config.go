package ferry

import (
	"cmp"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/effects/email"
	"github.com/ferry-outbox/ferry/effects/payment"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/walrelay"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
	"go.temporal.io/sdk/client"
)

// Config is the relay's settings: what New, Poller and Worker read. The
// connections are not here: New borrows them (Deps), the Postgres and
// Temporal modules take PostgresConfig and TemporalConfig. Zero fields take
// the default written on each; docs/configuration.md lists the flag and
// FERRY_* variable of the ferry command that sets each field.
type Config struct {
	// TaskQueue of the aggregate workflows, the same on pollers and
	// workers: 1-200 letters, digits, '_', '.', ':' or '-'. Default "ferry".
	TaskQueue string
	// Namespace the Temporal client is connected to, where the worker
	// checks that Ferry's search attributes are registered. Default
	// "default".
	Namespace string

	// BatchSize is how many of the oldest pending rows one claim of the
	// poller takes (1 to 10,000); it adds up to 4x as many later rows of
	// the same aggregates. Default 200.
	BatchSize int
	// Lease of claimed rows; it must exceed the poller's signal timeout
	// (5s) plus its mark timeout (5s). Default 30s.
	Lease time.Duration
	// PollInterval, the poller's fallback when no NOTIFY arrives; at least
	// 10ms. Default 1s.
	PollInterval time.Duration
	// StartMode of aggregates the poller has not dispatched within
	// IdleTimeout: poller.StartOneShot (a run with the events in its input
	// that completes once they are published) or poller.StartKeepAlive.
	// Default "one-shot".
	StartMode string
	// Lane is how events are delivered: LaneWorkflow (every event through
	// its aggregate's workflow) or LanePublishFirst (the poller publishes
	// to RabbitMQ itself, with the broker settings below, and hands an
	// aggregate to its workflow only when a publish fails, an event has
	// effects or workflow destinations, or an operator repairs it;
	// docs/lanes.md). Every poller of one outbox runs the same lane.
	// Default "workflow".
	Lane string
	// Source is where the poller finds committed events: SourcePoll (claims
	// with FOR UPDATE SKIP LOCKED, woken by NOTIFY) or SourceWAL (a logical
	// replication slot, package walrelay; needs wal_level=logical and the
	// REPLICATION attribute). Default "poll".
	Source string
	// WALSlot names SourceWAL's replication slot. Default "ferry_outbox".
	WALSlot string
	// WALPublication names SourceWAL's publication. Default "ferry_outbox".
	WALPublication string
	// WALCatchUpInterval is how often SourceWAL runs a claim pass for rows
	// the stream cannot deliver; at least 1s. Default 30s.
	WALCatchUpInterval time.Duration

	// AMQPURL of RabbitMQ, amqp:// or amqps://, for the worker's publisher
	// and the publish-first lane's pollers. Default
	// "amqp://guest:guest@127.0.0.1:5672/".
	AMQPURL string
	// Exchange events are published to: 1-255 letters, digits, '_', '.',
	// ':' or '-'. Default "ferry.events".
	Exchange string
	// RoutingKey template: {aggregate_type}, {event_type} and plain text.
	// Default "{aggregate_type}.{event_type}".
	RoutingKey string
	// MaxMessageBytes is the largest payload published (at most 512 MiB); a
	// larger event is quarantined (PayloadTooLarge) without being sent.
	// Keep it at or below RabbitMQ's max_message_size. Default 16 MiB.
	MaxMessageBytes int
	// ConnectTimeout bounds connecting to RabbitMQ in Relay.Start.
	// Default 10s.
	ConnectTimeout time.Duration
	// WorkflowTaskPollers of the worker, at least 2. Default 8.
	WorkflowTaskPollers int

	// PublishBatchSize is the most events an aggregate workflow publishes
	// in one fast-path local activity (1 to 1000); -1 publishes one regular
	// activity per event. Default 100.
	PublishBatchSize int
	// IdleTimeout after which an idle aggregate workflow completes; the
	// poller also uses it to choose Signal-With-Start for aggregates it
	// dispatched that recently. Default 1m.
	IdleTimeout time.Duration
	// Policies of retries and poison handling by event type, "*" for the
	// rest. Default: 10 attempts, then block the aggregate.
	Policies map[string]workflows.EventPolicy
	// MaxBlockedRefs is the most event references a blocked aggregate
	// workflow keeps; the rows of events signalled beyond it stay pending
	// until its repair. -1: no bound. Default 5000.
	MaxBlockedRefs int

	// RowRetention: delivered rows older than this are deleted by the
	// retention schedule; at least 1h. Default 720h (30 days).
	RowRetention time.Duration
	// PayloadRetention, when set and shorter than RowRetention, blanks the
	// payloads of older delivered rows (identity and timestamps stay).
	// Default 0 (keep): payloads live as long as rows.
	PayloadRetention time.Duration
	// DriftSample is how many of the most recently active aggregates each
	// reconcile run compares with their workflows' state (at most 1000);
	// -1 turns the check off. Default 50.
	DriftSample int
	// NoSchedules: workers leave the retention and reconcile schedules
	// alone. Default false: every worker keeps them in place (idempotent).
	NoSchedules bool

	// Effects routes event types to effect workflows (payments, e-mail)
	// and configures them. Default: none.
	Effects EffectsConfig

	// Destinations route event types to workflows of your own, started or
	// signalled from the publish path, each
	// "<aggregate_type>.<event_type>=<action>:<name>[,key=value…]", e.g.
	// "order.created=start:fulfilment,type=Fulfilment,queue=orders"
	// (package destination; docs/workflow-destinations.md). Default: none.
	Destinations []string
	// NoBroker: the worker never connects to RabbitMQ and publishes
	// nothing to it; events go only to their Destinations, and an event
	// type without one is quarantined (NoDestination). AMQPURL, Exchange,
	// RoutingKey, MaxMessageBytes and ConnectTimeout are then unused.
	// Needs Destinations. Default false.
	NoBroker bool

	// filled is what WithDefaults made of this Config (filledConfig).
	filled *filledConfig
}

// Defaults of Config and the connections' configs that are no component's
// own: a local development setup.
const (
	DefaultAMQPURL         = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultPostgresURL     = "postgres://postgres@127.0.0.1:5432/postgres"
	DefaultTemporalAddress = "127.0.0.1:7233"
	// DefaultConnectTimeout bounds connecting to each dependency.
	DefaultConnectTimeout = 10 * time.Second
	DefaultSMTPFrom       = "ferry@localhost"
)

// filledConfig is what WithDefaults checked and parsed (the routing key
// template, the workflow destinations, the effect routes), carried with
// the Config it returned and that Config's copies: New and the modules
// build from it without parsing again, and do not fill a filled Config a
// second time. of is that Config as returned, so that a copy changed since
// is filled anew.
type filledConfig struct {
	of           Config
	routingKey   func(aggregateType, eventType string) string
	destinations *destination.Router
	// effects is nil without effect routes.
	effects *effects.Router
}

// fills counts the Configs WithDefaults filled (a test holds the modules to
// one per process).
var fills atomic.Int64

// isFilled says whether c is a Config WithDefaults returned, unchanged.
func (c Config) isFilled() bool {
	if c.filled == nil {
		return false
	}
	bare := c
	bare.filled = nil
	return reflect.DeepEqual(bare, c.filled.of)
}

// parsed is what WithDefaults parsed of c, filling c first when it is not
// a filled Config (New and the modules hand the wiring filled ones).
func (c Config) parsed() (*filledConfig, error) {
	if !c.isFilled() {
		var err error
		if c, err = c.WithDefaults(); err != nil {
			return nil, err
		}
	}
	return c.filled, nil
}

// EffectsConfig is Config.Effects: effect routes and the built-in payment
// and e-mail effects (docs/side-effects.md). The zero value routes nothing.
type EffectsConfig struct {
	// Routes, each "<aggregate_type>.<event_type>=<effect>[,<effect>…]",
	// e.g. "order.created=charge,email:confirmation". Default: none.
	Routes []string
	// PaymentsURL is the payment provider's API. Required when a route
	// charges or refunds. Default: none.
	PaymentsURL string
	// PaymentsAPIKey is sent as a bearer token. A secret: never printed.
	// Default: none.
	PaymentsAPIKey string
	// PaymentsTimeout of one request to the provider, shorter than
	// PaymentAttemptTimeout. Default 10s.
	PaymentsTimeout time.Duration
	// PaymentAmountField of the event payload (integer, minor units).
	// Default "amount".
	PaymentAmountField string
	// PaymentEscalateAfter: an outcome unknown this long blocks for an
	// operator. Default 1h (far inside the provider's 24h key retention).
	PaymentEscalateAfter time.Duration
	// PaymentAttemptTimeout bounds one send attempt, and is how long an
	// attempt whose worker died waits before the next looks the key up.
	// Default 1m.
	PaymentAttemptTimeout time.Duration
	// SMTPAddress host:port. Required when a route sends e-mail. Default:
	// none.
	SMTPAddress string
	// SMTPFrom is the sender address. Default "ferry@localhost".
	SMTPFrom string
	// EmailAmbiguous is "resend" (same Message-ID) or "park" (an operator
	// decides) for a drop after the final ".". Default "resend".
	EmailAmbiguous string
}

// Roles says which components New builds.
type Roles struct {
	Poller bool
	Worker bool
}

// Sources of the poller role (Config.Source).
const (
	SourcePoll = "poll"
	SourceWAL  = "wal"
)

// Lanes (Config.Lane).
const (
	LaneWorkflow     = poller.LaneWorkflow
	LanePublishFirst = poller.LanePublishFirst
)

// FieldError is a setting with a value Ferry cannot use. Field names the Go
// field, as "Config.BatchSize" or "TemporalConfig.TLSKey"; the ferry command
// shows the flag and environment variable instead.
type FieldError struct {
	Field string
	// Problem says what is wrong and what would be right, starting with a
	// verb ("must be at least 1, got 0").
	Problem string
}

func (e *FieldError) Error() string { return "ferry: " + e.Field + " " + e.Problem }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// WithDefaults returns c with its zero fields filled and checks every
// value, by value: it reads no file and dials nothing. The defaults and
// limits are the components' (poller.DefaultBatchSize,
// poller.MaxBatchSize, …). New and the modules call it; a service calls it
// to see the effective settings. A Config it returned comes back as it is,
// unless a field was changed since, so a service that fills its Config
// once and supplies it has it filled once. Errors are *FieldError.
func (c Config) WithDefaults() (Config, error) {
	if c.isFilled() {
		return c, nil
	}
	c.filled = nil
	fills.Add(1)
	c.TaskQueue = cmp.Or(c.TaskQueue, workflows.DefaultTaskQueue)
	c.Namespace = cmp.Or(c.Namespace, client.DefaultNamespace)
	c.BatchSize = cmp.Or(c.BatchSize, poller.DefaultBatchSize)
	c.Lease = cmp.Or(c.Lease, poller.DefaultLease)
	c.PollInterval = cmp.Or(c.PollInterval, poller.DefaultPollInterval)
	c.StartMode = cmp.Or(c.StartMode, poller.DefaultStartMode)
	c.Source = cmp.Or(c.Source, SourcePoll)
	c.Lane = cmp.Or(c.Lane, poller.DefaultLane)
	c.WALSlot = cmp.Or(c.WALSlot, walrelay.DefaultSlot)
	c.WALPublication = cmp.Or(c.WALPublication, walrelay.DefaultPublication)
	c.WALCatchUpInterval = cmp.Or(c.WALCatchUpInterval, walrelay.DefaultCatchUpInterval)
	c.AMQPURL = cmp.Or(c.AMQPURL, DefaultAMQPURL)
	c.Exchange = cmp.Or(c.Exchange, broker.DefaultExchange)
	c.RoutingKey = cmp.Or(c.RoutingKey, rabbitmq.DefaultRoutingKeyTemplate)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, broker.DefaultMaxMessageBytes)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, DefaultConnectTimeout)
	c.WorkflowTaskPollers = cmp.Or(c.WorkflowTaskPollers, worker.DefaultWorkflowTaskPollers)
	c.PublishBatchSize = cmp.Or(c.PublishBatchSize, workflows.DefaultPublishBatchSize)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, workflows.DefaultIdleTimeout)
	c.MaxBlockedRefs = cmp.Or(c.MaxBlockedRefs, workflows.DefaultMaxBlockedRefs)
	c.RowRetention = cmp.Or(c.RowRetention, workflows.DefaultRowRetention)
	c.DriftSample = cmp.Or(c.DriftSample, workflows.DefaultDriftSample)
	var effectRoutes *effects.Router
	var err error
	if c.Effects, effectRoutes, err = c.Effects.withDefaults(); err != nil {
		return c, err
	}
	f, err := c.validate()
	if err != nil {
		return c, err
	}
	f.effects = effectRoutes
	f.of = c
	c.filled = f
	return c, nil
}

var (
	taskQueueName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,200}$`)
	// exchangeName is broker.New's rule, checked here by value so that a
	// bad value names Config.Exchange before anything is built.
	exchangeName = regexp.MustCompile(broker.ExchangePattern)
	// walName is walrelay's rule for slot and publication names.
	walName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

// validate checks the filled values and returns what it parsed.
func (c Config) validate() (*filledConfig, error) {
	switch {
	case !taskQueueName.MatchString(c.TaskQueue):
		return nil, fieldErr("Config.TaskQueue", "%q: use 1-200 letters, digits, '_', '.', ':' or '-'", c.TaskQueue)
	case c.BatchSize < 1 || c.BatchSize > poller.MaxBatchSize:
		return nil, fieldErr("Config.BatchSize", "must be 1 to %d, got %d", poller.MaxBatchSize, c.BatchSize)
	case c.Lease <= poller.DefaultSignalTimeout+poller.DefaultMarkTimeout:
		return nil, fieldErr("Config.Lease", "must exceed the signal timeout %s + the mark timeout %s, got %s",
			poller.DefaultSignalTimeout, poller.DefaultMarkTimeout, c.Lease)
	case c.PollInterval < poller.MinPollInterval:
		return nil, fieldErr("Config.PollInterval", "must be at least %s, got %s", poller.MinPollInterval, c.PollInterval)
	case c.StartMode != poller.StartOneShot && c.StartMode != poller.StartKeepAlive:
		return nil, fieldErr("Config.StartMode", "%q: use %s or %s", c.StartMode, poller.StartOneShot, poller.StartKeepAlive)
	case c.Lane != LaneWorkflow && c.Lane != LanePublishFirst:
		return nil, fieldErr("Config.Lane", "%q: use %s (every event through its aggregate's workflow) or %s (publish directly, the workflow only for aggregates that need it)", c.Lane, LaneWorkflow, LanePublishFirst)
	case c.Lane == LanePublishFirst && c.NoBroker:
		return nil, fieldErr("Config.Lane", "%s publishes to RabbitMQ, and Config.NoBroker says there is none: use the %s lane without a broker", LanePublishFirst, LaneWorkflow)
	case c.Source != SourcePoll && c.Source != SourceWAL:
		return nil, fieldErr("Config.Source", "%q: use %s (claim pending rows) or %s (tail the write-ahead log)", c.Source, SourcePoll, SourceWAL)
	case !walName.MatchString(c.WALSlot):
		return nil, fieldErr("Config.WALSlot", "%q: use 1-63 lower-case letters, digits or '_', not starting with a digit", c.WALSlot)
	case !walName.MatchString(c.WALPublication):
		return nil, fieldErr("Config.WALPublication", "%q: use 1-63 lower-case letters, digits or '_', not starting with a digit", c.WALPublication)
	case c.WALCatchUpInterval < walrelay.MinCatchUpInterval:
		return nil, fieldErr("Config.WALCatchUpInterval", "must be at least %s, got %s", walrelay.MinCatchUpInterval, c.WALCatchUpInterval)
	case !isAMQPURL(c.AMQPURL):
		return nil, fieldErr("Config.AMQPURL", "%s: must be amqp://… or amqps://…", redactURL(c.AMQPURL))
	case !exchangeName.MatchString(c.Exchange):
		return nil, fieldErr("Config.Exchange", "%q: use 1-255 letters, digits, '_', '.', ':' or '-'", c.Exchange)
	case c.MaxMessageBytes < 1 || c.MaxMessageBytes > broker.MaxMessageBytesLimit:
		return nil, fieldErr("Config.MaxMessageBytes", "must be 1 to %d (RabbitMQ's hard limit on max_message_size), got %d", broker.MaxMessageBytesLimit, c.MaxMessageBytes)
	case c.ConnectTimeout < 0:
		return nil, fieldErr("Config.ConnectTimeout", "must be positive, got %s", c.ConnectTimeout)
	case c.WorkflowTaskPollers < worker.MinWorkflowTaskPollers:
		return nil, fieldErr("Config.WorkflowTaskPollers", "must be at least %d, got %d", worker.MinWorkflowTaskPollers, c.WorkflowTaskPollers)
	case c.PublishBatchSize < -1 || c.PublishBatchSize > workflows.MaxPublishBatchSize:
		return nil, fieldErr("Config.PublishBatchSize", "must be 1 to %d, or -1 for one activity per event, got %d", workflows.MaxPublishBatchSize, c.PublishBatchSize)
	case c.IdleTimeout < 0:
		return nil, fieldErr("Config.IdleTimeout", "must be positive, got %s", c.IdleTimeout)
	case c.MaxBlockedRefs < -1:
		return nil, fieldErr("Config.MaxBlockedRefs", "must be at least 1, or -1 for no bound, got %d", c.MaxBlockedRefs)
	case c.RowRetention < time.Hour:
		return nil, fieldErr("Config.RowRetention", "must be at least 1h (delivered rows are kept that long), got %s", c.RowRetention)
	case c.PayloadRetention < 0:
		return nil, fieldErr("Config.PayloadRetention", "must be positive, or 0 to keep payloads, got %s", c.PayloadRetention)
	case c.DriftSample < -1 || c.DriftSample > workflows.MaxDriftSample:
		return nil, fieldErr("Config.DriftSample", "must be 1 to %d aggregates, or -1 for no drift check, got %d", workflows.MaxDriftSample, c.DriftSample)
	}
	key, err := rabbitmq.RoutingKeyTemplate(c.RoutingKey)
	if err != nil {
		return nil, fieldErr("Config.RoutingKey", "%q: %v", c.RoutingKey, err)
	}
	router, err := c.destinations()
	if err != nil {
		return nil, err
	}
	if c.NoBroker && router.Len() == 0 {
		return nil, fieldErr("Config.NoBroker", "needs Config.Destinations: without a broker and without a workflow destination every event would be quarantined")
	}
	for typ, p := range c.Policies {
		if p.MaxAttempts < 0 || p.MaxAttempts > 1000 {
			return nil, fieldErr("Config.Policies", "%q: MaxAttempts must be 1 to 1000, got %d", typ, p.MaxAttempts)
		}
		if p.OnPoison != "" && p.OnPoison != workflows.OnPoisonBlock && p.OnPoison != workflows.OnPoisonSkip {
			return nil, fieldErr("Config.Policies", "%q: OnPoison %q: use %s or %s", typ, p.OnPoison, workflows.OnPoisonBlock, workflows.OnPoisonSkip)
		}
	}
	return &filledConfig{routingKey: key, destinations: router}, nil
}

// DestinationRouter is Config.Destinations as WithDefaults parsed them;
// it fills c first when c is not a Config WithDefaults returned.
func (c Config) DestinationRouter() (*destination.Router, error) {
	f, err := c.parsed()
	if err != nil {
		return nil, err
	}
	return f.destinations, nil
}

// destinations parses and checks Config.Destinations.
func (c Config) destinations() (*destination.Router, error) {
	dests, err := destination.ParseAll(c.Destinations)
	if err == nil {
		var r *destination.Router
		if r, err = destination.NewRouter(dests); err == nil {
			return r, nil
		}
	}
	return nil, fieldErr("Config.Destinations", "%v", err)
}

func isAMQPURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "amqp" || u.Scheme == "amqps")
}

// withDefaults fills and checks e, and returns its routes parsed (nil
// without any).
func (e EffectsConfig) withDefaults() (EffectsConfig, *effects.Router, error) {
	e.PaymentsTimeout = cmp.Or(e.PaymentsTimeout, payment.DefaultTimeout)
	e.PaymentAmountField = cmp.Or(e.PaymentAmountField, payment.DefaultAmountField)
	e.PaymentEscalateAfter = cmp.Or(e.PaymentEscalateAfter, effects.DefaultEscalateAfter)
	e.PaymentAttemptTimeout = cmp.Or(e.PaymentAttemptTimeout, effects.DefaultAttemptTimeout)
	e.SMTPFrom = cmp.Or(e.SMTPFrom, DefaultSMTPFrom)
	e.EmailAmbiguous = cmp.Or(e.EmailAmbiguous, email.PolicyResend)
	switch {
	case e.PaymentAttemptTimeout < 0:
		return e, nil, fieldErr("EffectsConfig.PaymentAttemptTimeout", "must be positive, got %s", e.PaymentAttemptTimeout)
	case e.PaymentEscalateAfter < 0:
		return e, nil, fieldErr("EffectsConfig.PaymentEscalateAfter", "must be positive, got %s", e.PaymentEscalateAfter)
	}
	pp := effects.PaymentParams{EscalateAfter: e.PaymentEscalateAfter, AttemptTimeout: e.PaymentAttemptTimeout}
	if _, err := pp.WithDefaults(); err != nil {
		return e, nil, fieldErr("EffectsConfig.PaymentEscalateAfter", "%s: must be less than half the provider's key retention (%s)",
			e.PaymentEscalateAfter, effects.DefaultKeyRetention)
	}
	router, err := e.router()
	if err != nil {
		return e, nil, fieldErr("EffectsConfig.Routes", "%v", err)
	}
	kinds := router.Kinds()
	switch {
	case (slices.Contains(kinds, effects.KindCharge) || slices.Contains(kinds, effects.KindRefund)) && e.PaymentsURL == "":
		return e, nil, fieldErr("EffectsConfig.PaymentsURL", "is required: a route charges or refunds")
	case slices.Contains(kinds, effects.KindEmail) && e.SMTPAddress == "":
		return e, nil, fieldErr("EffectsConfig.SMTPAddress", "is required: a route sends e-mail")
	case e.PaymentsTimeout >= e.PaymentAttemptTimeout:
		return e, nil, fieldErr("EffectsConfig.PaymentsTimeout", "%s must be shorter than EffectsConfig.PaymentAttemptTimeout %s", e.PaymentsTimeout, e.PaymentAttemptTimeout)
	case e.EmailAmbiguous != email.PolicyResend && e.EmailAmbiguous != email.PolicyPark:
		return e, nil, fieldErr("EffectsConfig.EmailAmbiguous", "%q: use %s or %s", e.EmailAmbiguous, email.PolicyResend, email.PolicyPark)
	}
	if len(e.Routes) == 0 {
		router = nil
	}
	return e, router, nil
}

func (e EffectsConfig) router() (*effects.Router, error) {
	routes, err := effects.ParseRoutes(e.Routes)
	if err != nil {
		return nil, err
	}
	return effects.NewRouter(effects.RouterConfig{Routes: routes, Payment: effects.PaymentParams{
		EscalateAfter: e.PaymentEscalateAfter, AttemptTimeout: e.PaymentAttemptTimeout,
	}})
}

// String never shows the API key.
func (e EffectsConfig) String() string {
	type plain EffectsConfig
	if e.PaymentsAPIKey != "" {
		e.PaymentsAPIKey = hidden
	}
	return fmt.Sprintf("%+v", plain(e))
}
