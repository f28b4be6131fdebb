package activities

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/upcast"
	"github.com/ferry-outbox/ferry/workflows"
)

// Config configures the whole set of Ferry's activities (New); each
// concern takes only its part (PublishConfig, RepairConfig,
// MaintenanceConfig).
type Config struct {
	// Pool reaches the outbox tables. Required.
	Pool *pgxpool.Pool
	// Broker is where events go unless their destinations skip it, and
	// where replays go (PublishConfig.Broker): Ferry's RabbitMQ target.
	// Nil: a deployment without a broker. Required without Destinations.
	Broker delivery.Target
	// Destinations routes event types to workflows of your own. Default:
	// none.
	Destinations *destination.Router
	// Namespace of the destination workflows: Temporal's client's.
	// Required when Destinations has any.
	Namespace string
	// Upcast lifts payloads for workflow destinations
	// (PublishConfig.Upcast). Default: none.
	Upcast *upcast.Registry
	// DataConverter encodes what workflow destinations receive: the one
	// Temporal was dialled with (PublishConfig.DataConverter). Default:
	// Temporal's default.
	DataConverter converter.DataConverter
	// Metrics counts publishes, quarantines and repairs; nil counts
	// nothing.
	Metrics *metrics.Metrics
	// MaintenanceMetrics counts retention and reconciler work; nil counts
	// nothing.
	MaintenanceMetrics *metrics.Maintenance
	// TracerProvider starts the spans of deliveries to workflow
	// destinations (PublishConfig.TracerProvider). Default: the global
	// provider (otel.GetTracerProvider(); a no-op until one is set).
	TracerProvider trace.TracerProvider
	// Temporal lets the reconciler and the drift check ask about an
	// aggregate's workflow, and reaches workflow destinations. Without it
	// the first two fail (non-retryable); it is required with
	// Destinations.
	Temporal client.Client
	// Effects resolves the effect workflows to start for a published event
	// (effects.Router.For). Default: none.
	Effects func(aggregateType, eventType string) []workflows.EffectStart
}

// Activities is the set a worker hosts: the aggregate workflow's publish
// path, its quarantine and repair path, and the scheduled maintenance.
type Activities struct {
	Publish     *Publish
	Repair      *Repair
	Maintenance *Maintenance
}

// New validates cfg and builds the three parts.
func New(cfg Config) (*Activities, error) {
	if cfg.Pool == nil {
		return nil, errors.New("activities: Config.Pool is nil")
	}
	p, err := NewPublish(PublishConfig{Pool: cfg.Pool, Broker: cfg.Broker,
		Destinations: cfg.Destinations, Temporal: cfg.Temporal, Namespace: cfg.Namespace, Upcast: cfg.Upcast, DataConverter: cfg.DataConverter,
		Metrics: cfg.Metrics.Relay(), TracerProvider: cfg.TracerProvider, Effects: cfg.Effects})
	if err != nil {
		return nil, err
	}
	r, err := NewRepair(RepairConfig{Pool: cfg.Pool, Broker: cfg.Broker, Metrics: cfg.Metrics})
	if err != nil {
		return nil, err
	}
	m, err := NewMaintenance(MaintenanceConfig{Pool: cfg.Pool, Temporal: cfg.Temporal, Metrics: cfg.MaintenanceMetrics})
	if err != nil {
		return nil, err
	}
	return &Activities{Publish: p, Repair: r, Maintenance: m}, nil
}

// Registry is the part of a Temporal worker that Register needs.
type Registry interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Register registers every activity of the set under its wire name; the
// publish activities answer runs with settings (Publish.Register).
func (a *Activities) Register(r Registry, settings workflows.Settings) {
	a.Publish.Register(r, settings)
	a.Repair.Register(r)
	a.Maintenance.Register(r)
}

// Error types of non-retryable or classified application errors.
const (
	ErrTypeEventMissing = "EventMissing"
	ErrTypeMismatch     = "EventMismatch"
	ErrTypeUnroutable   = "Unroutable"
	ErrTypeBroker       = "BrokerUnavailable"
	// ErrTypeTooLarge: the payload is over broker.Config.MaxMessageBytes
	// and was not sent. Non-retryable: the event is quarantined at once.
	ErrTypeTooLarge = "PayloadTooLarge"
	// ErrTypeRefused: the broker closed the channel refusing this message
	// (406 PRECONDITION_FAILED, e.g. over its max_message_size).
	// Non-retryable: the broker refuses it again.
	ErrTypeRefused = "MessageRefused"
	// ErrTypeLostOwnership: the run's aggregate is not owned under the
	// run's epoch any more (the publish-first lane: the reconciler took it
	// back, or another owner has it). Non-retryable: nothing was marked,
	// and the run fails, loudly, rather than wait for versions another
	// owner publishes.
	ErrTypeLostOwnership = workflows.ErrClassLostOwnership
)

// lostOwnership is the error of a fenced write the database refused.
func lostOwnership(what, aggregateType, aggregateID string, epoch int64) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"%s refused: aggregate %s is not owned by this run under epoch %d any more (the reconciler took it back, or the lane handed it on): nothing was marked, and this run stops; its events are published by the aggregate's current owner",
		what, workflows.WorkflowID(aggregateType, aggregateID), epoch), ErrTypeLostOwnership, nil)
}

// errTypeMarkPublished labels ferry_publish_failures_total when an event was
// delivered but marking it published failed (it is delivered again).
const errTypeMarkPublished = "MarkPublished"

// publishErrorClasses are the error_class values the publish activities count
// in ferry_publish_failures_total.
var publishErrorClasses = []string{ErrTypeEventMissing, ErrTypeMismatch, ErrTypeUnroutable, ErrTypeBroker, ErrTypeTooLarge,
	ErrTypeRefused, ErrTypeDestination, ErrTypeBadDestination, ErrTypeNoDestination, errTypeMarkPublished}
