package rabbitmq

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/internal/telemetry"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/relaydb"
)

// Config configures a Target.
type Config struct {
	// Publisher sends with mandatory and publisher confirms. Required. The
	// target takes it over: Connect dials it, Close closes it.
	Publisher *broker.Publisher
	// RoutingKey builds a message's routing key (RoutingKeyTemplate).
	// Default DefaultRoutingKey.
	RoutingKey func(aggregateType, eventType string) string
	// TracerProvider starts a ferry.publish span per message. Default: the
	// global provider (otel.GetTracerProvider(); a no-op until one is set).
	TracerProvider trace.TracerProvider
	// Logger warns about producer headers with reserved names, outside an
	// activity (inside one, the activity's logger does). Default
	// slog.Default().
	Logger *slog.Logger
}

// Target is Ferry's message contract on RabbitMQ (docs/consuming.md):
// message id = event id, type = event type, Ferry's ferry-* headers and
// the W3C trace context beside the producer's headers, the payload as the
// body. It is a delivery.Target, safe for concurrent use.
type Target struct {
	pub        *broker.Publisher
	routingKey func(aggregateType, eventType string) string
	tracer     trace.Tracer
	log        *slog.Logger
}

var _ delivery.Target = (*Target)(nil)

// New validates cfg. It dials nothing: the publisher dials on Connect or
// on the first publish.
func New(cfg Config) (*Target, error) {
	if cfg.Publisher == nil {
		return nil, errors.New("rabbitmq: Config.Publisher is nil")
	}
	if cfg.RoutingKey == nil {
		cfg.RoutingKey = DefaultRoutingKey
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Target{pub: cfg.Publisher, routingKey: cfg.RoutingKey, log: cfg.Logger,
		tracer: cfg.TracerProvider.Tracer("github.com/ferry-outbox/ferry/delivery")}, nil
}

// Connect dials the broker now, so that a process learns at its start
// that RabbitMQ does not answer (a publish redials on its own).
func (r *Target) Connect(ctx context.Context) error { return r.pub.Connect(ctx) }

// Close closes the connection. Safe to call more than once.
func (r *Target) Close() error { return r.pub.Close() }

// Publish sends the events in one confirm window (broker.PublishBatch)
// and returns how many leading ones the broker confirmed routed; err is
// in one of delivery's classes (ErrUnroutable, ErrNacked, ErrTooLarge,
// ErrRefused, ErrUnavailable), with broker's error and message. Each
// message has a producer span, ended when its outcome is known.
func (r *Target) Publish(ctx context.Context, events []delivery.Event) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	msgs := make([]broker.Message, len(events))
	spans := make([]trace.Span, len(events))
	for i, e := range events {
		msgs[i], spans[i] = r.message(ctx, e.ID, e.Row)
	}
	n, err := r.pub.PublishBatch(ctx, msgs)
	for i, span := range spans {
		if i >= n && err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	return n, classify(err)
}

// classes maps broker's sentinels to delivery's.
var classes = []struct{ broker, delivery error }{
	{broker.ErrUnroutable, delivery.ErrUnroutable},
	{broker.ErrNacked, delivery.ErrNacked},
	{broker.ErrTooLarge, delivery.ErrTooLarge},
	{broker.ErrRefused, delivery.ErrRefused},
	{broker.ErrUnavailable, delivery.ErrUnavailable},
}

// classify puts a broker error in its delivery class, keeping its message
// and the broker's error in the chain; other errors (a context's, a
// closed publisher) come back as they are.
func classify(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range classes {
		if errors.Is(err, c.broker) {
			return classed{err: err, class: c.delivery}
		}
	}
	return err
}

// classed is a broker error in its delivery class: its message is the
// broker's.
type classed struct{ err, class error }

func (c classed) Error() string   { return c.err.Error() }
func (c classed) Unwrap() []error { return []error{c.err, c.class} }

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
func (r *Target) message(ctx context.Context, id string, ev relaydb.PublishRow) (broker.Message, trace.Span) {
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
	key := r.routingKey(ev.AggregateType, ev.EventType)
	// The parent is the caller's span when it is in the row's trace, else
	// the row's own context with a link to the caller's span
	// (telemetry.PublishParent says why).
	ctx, links := telemetry.PublishParent(ctx, ev.TraceParent, ev.TraceState)
	ctx, span := r.tracer.Start(ctx, "ferry.publish "+key,
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
	if len(overridden) > 0 {
		slices.Sort(overridden)
		const msg = "event headers with reserved names dropped, Ferry's own sent (the row was written around the outbox_events_headers_valid check)"
		if activity.IsActivity(ctx) {
			activity.GetLogger(ctx).Warn(msg, "event_id", id, "headers", overridden)
		} else {
			r.log.Warn(msg, "event_id", id, "headers", overridden)
		}
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
