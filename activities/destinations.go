package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/relaydb"
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
	// publishes to no broker (PublishConfig.Broker is nil) and the event
	// type has no workflow destination. Quarantined at once: route the event type,
	// then retry the event.
	ErrTypeNoDestination = "NoDestination"
)

// targets is where the publish path sends an event: the broker target
// unless the event type's destinations skip it (nil: a deployment without
// a broker), and the event type's workflow destinations (dests, nil
// without routes).
type targets struct {
	broker delivery.Target
	router *destination.Router
	dests  *destination.Target
}

// plan is where one event goes.
type plan struct {
	broker, dests bool
}

// planFor resolves an event's targets; an event that would go nowhere is a
// non-retryable ErrTypeNoDestination.
func (t *targets) planFor(id string, ev relaydb.PublishRow) (plan, error) {
	routes, skip := t.router.For(ev.AggregateType, ev.EventType)
	p := plan{broker: t.broker != nil && !skip, dests: len(routes) > 0}
	if !p.broker && !p.dests {
		return p, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"event %s (%s.%s) has no workflow destination and this worker publishes to no broker (Config.NoBroker; ferry: --no-broker): route %s.%s to a workflow (Config.Destinations; ferry: --destination), then retry the event",
			id, ev.AggregateType, ev.EventType, ev.AggregateType, ev.EventType), ErrTypeNoDestination, nil)
	}
	return p, nil
}

// deliver sends the event to its workflow destinations when it has any
// (destination.Target: each in route order, stopping at the first
// failure; a retry repeats the delivered ones, which Temporal drops),
// classifying a failure by ErrType.
func (t *targets) deliver(ctx context.Context, id string, ev relaydb.PublishRow, p plan) error {
	if !p.dests {
		return nil
	}
	_, err := t.dests.Publish(ctx, []delivery.Event{{ID: id, Row: ev}})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, destination.ErrPermanent):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadDestination, err)
	default:
		return temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeDestination, err)
	}
}
