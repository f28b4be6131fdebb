package activities

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/internal/telemetry"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/upcast"
)

// Error types of workflow destinations.
const (
	// ErrTypeDestination: a start or signal failed in a way a retry can
	// fix (Temporal unreachable, the signalled workflow not running yet).
	// Retried with the event's policy, then quarantined.
	ErrTypeDestination = "DestinationFailed"
	// ErrTypeBadDestination: the event does not fit a destination's route
	// (a payload field its workflow ID names is missing, the ID is one
	// Temporal refuses, an upcaster failed). Quarantined at once.
	ErrTypeBadDestination = "BadDestination"
	// ErrTypeNoDestination: the event would go nowhere: the worker
	// publishes to no broker (PublishConfig.NoBroker) and the event type has
	// no workflow destination. Quarantined at once: route the event type,
	// then retry the event.
	ErrTypeNoDestination = "NoDestination"
)

// targets is where the publish path sends events besides RabbitMQ: the
// workflow destinations, and whether there is a broker at all.
type targets struct {
	router   *destination.Router
	sender   *destination.Sender
	upcast   *upcast.Registry
	noBroker bool
	metrics  *metrics.Relay
	tracer   trace.Tracer
}

// plan is where one event goes.
type plan struct {
	broker bool
	routes []destination.Route
}

// planFor resolves an event's targets; an event that would go nowhere is a
// non-retryable ErrTypeNoDestination.
func (t *targets) planFor(id string, ev relaydb.PublishRow) (plan, error) {
	routes, skip := t.router.For(ev.AggregateType, ev.EventType)
	p := plan{broker: !t.noBroker && !skip, routes: routes}
	if !p.broker && len(p.routes) == 0 {
		return p, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"event %s (%s.%s) has no workflow destination and this worker publishes to no broker (Config.NoBroker; ferry: --no-broker): route %s.%s to a workflow (Config.Destinations; ferry: --destination), then retry the event",
			id, ev.AggregateType, ev.EventType, ev.AggregateType, ev.EventType), ErrTypeNoDestination, nil)
	}
	return p, nil
}

// deliver sends the event to each of its workflow destinations in route
// order, stopping at the first failure (a retry repeats the delivered ones,
// which Temporal drops: see package destination).
func (t *targets) deliver(ctx context.Context, id string, ev relaydb.PublishRow, routes []destination.Route) error {
	if len(routes) == 0 {
		return nil
	}
	env, err := t.envelope(id, ev)
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

func (t *targets) deliverOne(ctx context.Context, rt destination.Route, env destination.Envelope) error {
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
		t.metrics.Delivered(rt.Name, "failed")
		if errors.Is(err, destination.ErrPermanent) {
			return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadDestination, err)
		}
		return temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeDestination, err)
	}
	t.metrics.Delivered(rt.Name, string(outcome))
	return nil
}

// envelope is the row as destinations receive it, its payload lifted by
// the worker's upcasters when it has any.
func (t *targets) envelope(id string, ev relaydb.PublishRow) (destination.Envelope, error) {
	env := destination.Envelope{
		EventID:          id,
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
			return env, temporal.NewNonRetryableApplicationError(fmt.Sprintf("event %s: upcast for its workflow destinations: %v", id, err), ErrTypeBadDestination, err)
		}
		env.Payload, env.SchemaVersion = payload, version
	}
	return env, nil
}
