package activities

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/internal/failpoint"
	"github.com/ferry-outbox/ferry/internal/pgtext"
	"github.com/ferry-outbox/ferry/internal/telemetry"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/upcast"
	"github.com/ferry-outbox/ferry/workflows"
)

// PublishConfig configures Publish.
type PublishConfig struct {
	// Pool reaches the outbox tables. Required.
	Pool *pgxpool.Pool
	// Publisher sends to RabbitMQ. Required unless NoBroker.
	Publisher *broker.Publisher
	// NoBroker: publish nothing to RabbitMQ; every event goes only to its
	// workflow destinations, and an event type without one is quarantined
	// (ErrTypeNoDestination). Publisher must then be nil. Default false.
	NoBroker bool
	// Destinations routes event types to workflows of your own (package
	// destination). Default: none.
	Destinations *destination.Router
	// Temporal and Namespace reach the destination workflows. Required
	// when Destinations has any.
	Temporal  client.Client
	Namespace string
	// DataConverter encodes what destinations receive
	// (destination.SenderConfig.DataConverter): Temporal's client's.
	// Default: Temporal's default.
	DataConverter converter.DataConverter
	// Upcast, when set, lifts payloads to the current schema version
	// before they go to workflow destinations (the broker gets them as
	// written). Default: none, payloads as written.
	Upcast *upcast.Registry
	// Metrics counts publishes and their failures; nil counts nothing.
	Metrics *metrics.Relay
	// TracerProvider starts the publish span. Default: the global provider
	// (otel.GetTracerProvider(); a no-op until one is set).
	TracerProvider trace.TracerProvider
	// RoutingKey builds a message's routing key. Default
	// "<aggregate_type>.<event_type>".
	RoutingKey func(aggregateType, eventType string) string
	// Effects resolves the effect workflows to start for a published event
	// (effects.Router.For). Default: none.
	Effects func(aggregateType, eventType string) []workflows.EffectStart
}

// Publish holds the aggregate workflow's publish path: PublishEvent (the
// regular path, one event), PublishBatch (the fast path) and
// LoadAggregateCursor. The last two also answer a run that asks with the
// worker's workflow settings (workflows.Settings), which Register binds.
type Publish struct {
	sender
	targets  targets
	pool     *pgxpool.Pool
	metrics  *metrics.Relay
	effects  func(aggregateType, eventType string) []workflows.EffectStart
	settings workflows.Settings
}

// NewPublish validates cfg.
func NewPublish(cfg PublishConfig) (*Publish, error) {
	if cfg.Pool == nil {
		return nil, errors.New("activities: PublishConfig.Pool is nil")
	}
	switch {
	case cfg.Publisher == nil && !cfg.NoBroker:
		return nil, errors.New("activities: PublishConfig.Publisher is nil (set NoBroker for a deployment without RabbitMQ)")
	case cfg.Publisher != nil && cfg.NoBroker:
		return nil, errors.New("activities: PublishConfig.Publisher is set, but NoBroker says there is no broker")
	}
	t := targets{router: cfg.Destinations, upcast: cfg.Upcast, noBroker: cfg.NoBroker, metrics: cfg.Metrics}
	if cfg.Destinations.Len() > 0 {
		var err error
		if t.sender, err = destination.NewSender(destination.SenderConfig{Temporal: cfg.Temporal, Namespace: cfg.Namespace, DataConverter: cfg.DataConverter}); err != nil {
			return nil, fmt.Errorf("activities: PublishConfig.Destinations: %w", err)
		}
	}
	if cfg.Effects == nil {
		cfg.Effects = func(string, string) []workflows.EffectStart { return nil }
	}
	cfg.Metrics.KnownErrorClasses(publishErrorClasses...)
	p := &Publish{sender: newSender(cfg.Publisher, cfg.RoutingKey, cfg.TracerProvider), targets: t, pool: cfg.Pool,
		metrics: cfg.Metrics, effects: cfg.Effects, settings: workflows.Settings{}.WithDefaults()}
	p.targets.tracer = p.tracer
	return p, nil
}

// Register registers the publish activities under their wire names,
// answering runs that ask for settings with settings (zero fields: their
// defaults). The caller validated them (workflows.Settings.Validate;
// worker.New does).
func (a *Publish) Register(r Registry, settings workflows.Settings) {
	bound := *a
	bound.settings = settings.WithDefaults()
	r.RegisterActivityWithOptions(bound.PublishEvent, activity.RegisterOptions{Name: workflows.PublishEventActivity})
	r.RegisterActivityWithOptions(bound.LoadAggregateCursor, activity.RegisterOptions{Name: workflows.LoadCursorActivity})
	r.RegisterActivityWithOptions(bound.PublishBatch, activity.RegisterOptions{Name: workflows.PublishBatchActivity})
}

// workflowSettings is the answer to a run that asks: a copy, so no run
// shares the worker's map.
func (a *Publish) workflowSettings() *workflows.Settings {
	s := a.settings
	if s.Policies != nil {
		s.Policies = maps.Clone(s.Policies)
	}
	return &s
}

// sender turns an outbox row into an AMQP message and publishes it: the
// publish path's and a replay's.
type sender struct {
	pub        *broker.Publisher
	routingKey func(aggregateType, eventType string) string
	tracer     trace.Tracer
}

func newSender(pub *broker.Publisher, routingKey func(aggregateType, eventType string) string, tp trace.TracerProvider) sender {
	if routingKey == nil {
		routingKey = DefaultRoutingKey
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return sender{pub: pub, routingKey: routingKey, tracer: tp.Tracer("github.com/ferry-outbox/ferry/activities")}
}

// PublishEvent publishes one outbox event with a publisher confirm, then
// marks it published. A retry after a successful confirm whose mark was lost
// publishes again: delivery is at-least-once and consumers deduplicate by
// message id.
func (a *Publish) PublishEvent(ctx context.Context, in workflows.PublishInput) (workflows.PublishResult, error) {
	ev, err := loadEvent(ctx, a.pool, in.EventID)
	if err != nil {
		return workflows.PublishResult{}, err
	}
	if ev.AggregateType != in.AggregateType || ev.AggregateID != in.AggregateID || ev.Version != in.Version {
		return workflows.PublishResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("event %s is %s/%s v%d in outbox_events, but was signalled as %s/%s v%d",
				in.EventID, ev.AggregateType, ev.AggregateID, ev.Version, in.AggregateType, in.AggregateID, in.Version), ErrTypeMismatch, nil)
	}
	effects := a.effects(ev.AggregateType, ev.EventType)
	if ev.Status == "published" {
		return workflows.PublishResult{AlreadyPublished: true, Effects: effects}, nil
	}
	if err := a.deliverEvent(ctx, in.EventID, ev); err != nil {
		noteError(ctx, a.pool, in.EventID, err)
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) {
			a.metrics.PublishFailed(appErr.Type())
		}
		return workflows.PublishResult{}, err
	}
	failpoint.Inject("worker.after-confirm")
	if err := outbox.MarkPublished(ctx, a.pool, in.EventID); err != nil {
		a.metrics.PublishFailed(errTypeMarkPublished)
		return workflows.PublishResult{}, fmt.Errorf("mark event %s published: %w", in.EventID, err)
	}
	a.metrics.Published(ev.AggregateType, ev.DueAt)
	activity.GetLogger(ctx).Debug("published", "event_id", in.EventID, "version", in.Version)
	return workflows.PublishResult{Effects: effects}, nil
}

// deliverEvent sends one event everywhere it goes: to RabbitMQ (unless it
// skips the broker), then to each of its workflow destinations.
func (a *Publish) deliverEvent(ctx context.Context, id string, ev outbox.PublishRow) error {
	p, err := a.targets.planFor(id, ev)
	if err != nil {
		return err
	}
	if p.broker {
		if err := a.send(ctx, id, ev); err != nil {
			return err
		}
	}
	return a.targets.deliver(ctx, id, ev, p.routes)
}

// loadEvent reads an outbox row, classifying a row that cannot exist as
// non-retryable.
func loadEvent(ctx context.Context, pool *pgxpool.Pool, id string) (outbox.PublishRow, error) {
	ev, err := outbox.LoadForPublish(ctx, pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return ev, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("event %s is not in outbox_events (deleted before it was published?)", id), ErrTypeEventMissing, nil)
	}
	// invalid_text_representation: the id is no UUID, so no row can ever
	// match. Retrying would block the aggregate forever.
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "22P02" {
		return ev, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("event id %q is not a UUID, so it is not in outbox_events", id), ErrTypeEventMissing, err)
	}
	if err != nil {
		return ev, fmt.Errorf("load event %s: %w", id, err)
	}
	return ev, nil
}

// send publishes the row as an AMQP message and waits for the confirm,
// classifying failures by ErrType.
func (a *sender) send(ctx context.Context, id string, ev outbox.PublishRow) error {
	msg, span := a.message(ctx, id, ev)
	defer span.End()
	err := a.pub.Publish(ctx, msg)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return classifyPublish(err)
}

// message builds the AMQP message of a row and starts its producer span,
// a child of the trace stored with the row, whose context travels in the
// headers: the consumer's span becomes its child, so one trace runs command
// → outbox → publish → consumer. With no tracer provider set the span
// records nothing and the headers carry the row's own trace context. The
// caller ends the span.
//
// The producer's headers (outbox.Event.Headers) go in first and Ferry's
// over them: Ferry's always win. Validation and the schema refuse the
// reserved names, so a collision means a row written around the check; it
// is logged, once per message, naming the headers, never their values.
func (a *sender) message(ctx context.Context, id string, ev outbox.PublishRow) (broker.Message, trace.Span) {
	headers := make(amqp.Table, len(ev.Headers)+7)
	for k, v := range ev.Headers {
		headers[k] = v
	}
	own := amqp.Table{
		broker.HeaderAggregateType:    ev.AggregateType,
		broker.HeaderAggregateID:      ev.AggregateID,
		broker.HeaderAggregateVersion: ev.Version,
		broker.HeaderSchemaVersion:    int64(ev.SchemaVersion),
	}
	if ev.DueAt.After(ev.CreatedAt) {
		own[broker.HeaderDueAt] = ev.DueAt
	}
	key := a.routingKey(ev.AggregateType, ev.EventType)
	// The parent is the activity's span when it is in the row's trace,
	// else the row's own context with a link to the activity's span
	// (telemetry.PublishParent says why).
	ctx, links := telemetry.PublishParent(ctx, ev.TraceParent, ev.TraceState)
	ctx, span := a.tracer.Start(ctx, "ferry.publish "+key,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.message.id", id),
			attribute.String("messaging.destination.name", key),
			attribute.String("ferry.aggregate", ev.AggregateType+"/"+ev.AggregateID),
			attribute.Int64("ferry.aggregate_version", ev.Version),
		))
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	for k, v := range carrier {
		own[k] = v
	}
	var overridden []string
	for k, v := range own {
		if _, ok := headers[k]; ok {
			overridden = append(overridden, k)
		}
		headers[k] = v
	}
	for k := range ev.Headers {
		// Reserved in any case (outbox.ReservedHeader), but AMQP header
		// names are case-sensitive: a "Ferry-Aggregate-ID" beside Ferry's
		// own would only confuse a consumer.
		if _, ours := own[k]; !ours && outbox.ReservedHeader(k) {
			overridden = append(overridden, k)
			delete(headers, k)
		}
	}
	if len(overridden) > 0 && activity.IsActivity(ctx) {
		slices.Sort(overridden)
		activity.GetLogger(ctx).Warn("event headers with reserved names dropped, Ferry's own sent (the row was written around the outbox_events_headers_valid check)",
			"event_id", id, "headers", overridden)
	}
	return broker.Message{
		ID:         id,
		Type:       ev.EventType,
		RoutingKey: key,
		Headers:    headers,
		Body:       ev.Payload,
		Timestamp:  ev.CreatedAt,
	}, span
}

// classifyPublish turns a broker error into the activity's error type.
// The message is the broker's, so the row's last_error and the log say what
// the broker said.
func classifyPublish(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, broker.ErrTooLarge):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeTooLarge, err)
	case errors.Is(err, broker.ErrRefused):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRefused, err)
	case errors.Is(err, broker.ErrUnroutable):
		// Retryable: binding a queue fixes it. When the retries run out the
		// event is quarantined, never dropped.
		return temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeUnroutable, err)
	default:
		return temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeBroker, err)
	}
}

// LoadAggregateCursor reads the highest version of the aggregate delivered in
// order. An aggregate without a row has delivered nothing. Asked
// (CursorInput.Settings), it also answers with the workflow settings this
// worker was registered with.
func (a *Publish) LoadAggregateCursor(ctx context.Context, in workflows.CursorInput) (workflows.CursorResult, error) {
	var res workflows.CursorResult
	var err error
	res.Delivered, err = outbox.DeliveredVersion(ctx, a.pool, in.AggregateType, in.AggregateID)
	if err != nil {
		return res, fmt.Errorf("load cursor of %s/%s: %w", in.AggregateType, in.AggregateID, err)
	}
	if in.Settings {
		res.Settings = a.workflowSettings()
	}
	return res, nil
}

func noteError(ctx context.Context, pool *pgxpool.Pool, id string, cause error) {
	// Detached: the activity's context may be the reason we are here.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := outbox.NoteError(ctx, pool, id, pgtext.Truncate(cause.Error(), 1000)); err != nil {
		activity.GetLogger(ctx).Warn("could not record last_error", "event_id", id, "error", err)
	}
}
