package destination

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/internal/telemetry"
	"github.com/ferry-outbox/ferry/upcast"
)

// TargetConfig configures a Target.
type TargetConfig struct {
	// Router says which destinations each event type has. Required, with
	// at least one route.
	Router *Router
	// Sender reaches them (SenderConfig: Temporal, Namespace,
	// DataConverter). Required.
	Sender SenderConfig
	// Upcast, when set, lifts payloads to their current schema version
	// before they reach destinations. Default: payloads as written.
	Upcast *upcast.Registry
	// Metrics counts deliveries by destination and outcome (an Outcome, or
	// "failed"). Default: nothing counted.
	Metrics Metrics
	// TracerProvider starts a ferry.deliver span per delivery. Default: the
	// global provider (otel.GetTracerProvider(); a no-op until one is set).
	TracerProvider trace.TracerProvider
}

// Metrics is what a Target counts into (*metrics.Relay meets it).
type Metrics interface {
	Delivered(destination, outcome string)
}

// Target is the delivery.Target of workflow destinations: it delivers each
// event to every destination of its event type, in route order. Safe for
// concurrent use.
type Target struct {
	router  *Router
	sender  *Sender
	upcast  *upcast.Registry
	metrics Metrics
	tracer  trace.Tracer
}

var _ delivery.Target = (*Target)(nil)

// NewTarget validates cfg.
func NewTarget(cfg TargetConfig) (*Target, error) {
	if cfg.Router.Len() == 0 {
		return nil, errors.New("destination: TargetConfig.Router has no route")
	}
	s, err := NewSender(cfg.Sender)
	if err != nil {
		return nil, err
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	return &Target{router: cfg.Router, sender: s, upcast: cfg.Upcast, metrics: cfg.Metrics,
		tracer: cfg.TracerProvider.Tracer("github.com/ferry-outbox/ferry/destination")}, nil
}

// Publish delivers the events in order, each to its destinations in route
// order, and returns how many leading events every destination took; err
// says why the next one was not (its delivered destinations are repeated
// on a retry, which Temporal drops). An error wrapping ErrPermanent
// cannot succeed on retry: the event does not fit a route, or its
// upcaster failed. An event type without destinations is delivered at
// once.
func (t *Target) Publish(ctx context.Context, events []delivery.Event) (int, error) {
	for i, e := range events {
		if err := t.deliver(ctx, e); err != nil {
			return i, err
		}
	}
	return len(events), nil
}

func (t *Target) deliver(ctx context.Context, e delivery.Event) error {
	routes, _ := t.router.For(e.Row.AggregateType, e.Row.EventType)
	if len(routes) == 0 {
		return nil
	}
	env, err := t.envelope(e)
	if err != nil {
		return err
	}
	for _, rt := range routes {
		if err := t.deliverOne(ctx, rt, env); err != nil {
			return err
		}
	}
	return nil
}

func (t *Target) deliverOne(ctx context.Context, rt Route, env Envelope) error {
	// Parent and links as for a publish (telemetry.PublishParent).
	ctx, links := telemetry.PublishParent(ctx, env.TraceParent, env.TraceState)
	ctx, span := t.tracer.Start(ctx, "ferry.deliver "+rt.Name,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("ferry.destination", rt.Name),
			attribute.String("ferry.destination.action", string(rt.Action)),
			attribute.String("messaging.message.id", env.EventID),
			attribute.String("ferry.aggregate", env.Aggregate()),
			attribute.Int64("ferry.aggregate_version", env.AggregateVersion),
		))
	defer span.End()
	outcome, err := t.sender.Deliver(ctx, rt, env)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		t.count(rt.Name, "failed")
		return err
	}
	t.count(rt.Name, string(outcome))
	return nil
}

func (t *Target) count(destination, outcome string) {
	if t.metrics != nil {
		t.metrics.Delivered(destination, outcome)
	}
}

// envelope is the row as destinations receive it, its payload lifted by
// the upcasters when there are any.
func (t *Target) envelope(e delivery.Event) (Envelope, error) {
	ev := e.Row
	env := Envelope{
		EventID:          e.ID,
		EventType:        ev.EventType,
		AggregateType:    ev.AggregateType,
		AggregateID:      ev.AggregateID,
		AggregateVersion: ev.Version,
		SchemaVersion:    int(ev.SchemaVersion),
		Payload:          ev.Payload,
		Headers:          ev.Headers,
		TraceParent:      ev.TraceParent,
		TraceState:       ev.TraceState,
		CreatedAt:        ev.CreatedAt,
	}
	if t.upcast != nil {
		payload, version, err := t.upcast.Upcast(ev.EventType, env.SchemaVersion, ev.Payload)
		if err != nil {
			return env, permanentError{msg: fmt.Sprintf("event %s: upcast for its workflow destinations: %v", e.ID, err), cause: err}
		}
		env.Payload, env.SchemaVersion = payload, version
	}
	return env, nil
}

// permanentError is an ErrPermanent whose message is its own.
type permanentError struct {
	msg   string
	cause error
}

func (e permanentError) Error() string   { return e.msg }
func (e permanentError) Unwrap() []error { return []error{ErrPermanent, e.cause} }
