package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/internal/failpoint"
	"github.com/ferry-outbox/ferry/internal/pgtext"
	"github.com/ferry-outbox/ferry/internal/publishjournal"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/upcast"
	"github.com/ferry-outbox/ferry/workflows"
)

// PublishConfig configures Publish.
type PublishConfig struct {
	// Pool reaches the outbox tables. Required.
	Pool *pgxpool.Pool
	// Broker is where events go unless their event type's destinations
	// skip it (package delivery/rabbitmq: Ferry's message contract on
	// RabbitMQ). Nil: a deployment without a broker, where every event
	// goes only to its workflow destinations and an event type without one
	// is quarantined (ErrTypeNoDestination). Required without
	// Destinations.
	Broker delivery.Target
	// Destinations routes event types to workflows of your own (package
	// destination), delivered through a destination.Target. Default: none.
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
	// TracerProvider starts the spans of deliveries to workflow
	// destinations (Broker starts its own). Default: the global provider
	// (otel.GetTracerProvider(); a no-op until one is set).
	TracerProvider trace.TracerProvider
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
	t := targets{broker: cfg.Broker, router: cfg.Destinations}
	switch {
	case cfg.Destinations.Len() > 0:
		var m destination.Metrics
		if cfg.Metrics != nil {
			m = cfg.Metrics
		}
		var err error
		t.dests, err = destination.NewTarget(destination.TargetConfig{Router: cfg.Destinations, Upcast: cfg.Upcast, Metrics: m,
			TracerProvider: cfg.TracerProvider,
			Sender:         destination.SenderConfig{Temporal: cfg.Temporal, Namespace: cfg.Namespace, DataConverter: cfg.DataConverter}})
		if err != nil {
			return nil, fmt.Errorf("activities: PublishConfig.Destinations: %w", err)
		}
	case cfg.Broker == nil:
		return nil, errors.New("activities: PublishConfig.Broker is nil and there are no Destinations: every event would be quarantined (a deployment without a broker needs workflow destinations)")
	}
	if cfg.Effects == nil {
		cfg.Effects = func(string, string) []workflows.EffectStart { return nil }
	}
	cfg.Metrics.KnownErrorClasses(publishErrorClasses...)
	return &Publish{sender: sender{broker: cfg.Broker}, targets: t, pool: cfg.Pool,
		metrics: cfg.Metrics, effects: cfg.Effects, settings: workflows.Settings{}.WithDefaults()}, nil
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
	r.RegisterActivityWithOptions(bound.ReleaseAggregate, activity.RegisterOptions{Name: workflows.ReleaseAggregateActivity})
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

// sender publishes outbox rows to the broker target: the publish path's
// and a replay's. broker is nil without a broker.
type sender struct {
	broker delivery.Target
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
	if err := a.checkOwner(ctx, "publish", in.AggregateType, in.AggregateID, in.Epoch); err != nil {
		return workflows.PublishResult{}, err
	}
	defer publishjournal.Run(ctx, a.pool, in.AggregateType, in.AggregateID, in.Version, in.Version, in.Epoch).End(nil)
	if err := a.deliverEvent(ctx, in.EventID, ev); err != nil {
		noteError(ctx, a.pool, in.EventID, err)
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) {
			a.metrics.PublishFailed(appErr.Type())
		}
		return workflows.PublishResult{}, err
	}
	failpoint.Inject("worker.after-confirm")
	if err := a.markPublished(ctx, in); err != nil {
		a.metrics.PublishFailed(errTypeMarkPublished)
		return workflows.PublishResult{}, err
	}
	a.metrics.Published(ev.AggregateType, ev.DueAt)
	a.metrics.LanePublished(metrics.PathWorkflow, 1)
	activity.GetLogger(ctx).Debug("published", "event_id", in.EventID, "version", in.Version)
	return workflows.PublishResult{Effects: effects}, nil
}

// checkOwner fails with ErrTypeLostOwnership, before anything is sent,
// when a run that owns its aggregate under epoch (the publish-first lane)
// does not any more. Without an epoch it checks nothing.
func (a *Publish) checkOwner(ctx context.Context, what, aggregateType, aggregateID string, epoch int64) error {
	if epoch == 0 {
		return nil
	}
	owned, err := relaydb.Owned(ctx, a.pool, aggregateType, aggregateID, epoch)
	if err != nil {
		return fmt.Errorf("check the owner of %s/%s: %w", aggregateType, aggregateID, err)
	}
	if !owned {
		return lostOwnership(what, aggregateType, aggregateID, epoch)
	}
	return nil
}

// markPublished marks the confirmed event: under the run's epoch when it
// has one.
func (a *Publish) markPublished(ctx context.Context, in workflows.PublishInput) error {
	if in.Epoch == 0 {
		if err := relaydb.MarkPublished(ctx, a.pool, in.EventID); err != nil {
			return fmt.Errorf("mark event %s published: %w", in.EventID, err)
		}
		return nil
	}
	ok, err := relaydb.MarkPublishedFenced(ctx, a.pool, in.EventID, in.AggregateType, in.AggregateID, in.Epoch)
	if err != nil {
		return fmt.Errorf("mark event %s published: %w", in.EventID, err)
	}
	if !ok {
		return lostOwnership("marking event "+in.EventID+" published", in.AggregateType, in.AggregateID, in.Epoch)
	}
	return nil
}

// ReleaseAggregate gives an aggregate the run owns under its epoch back to
// the publish-first lane, unless relays handed it versions it has not
// delivered yet (Busy). An aggregate the run does not own any more counts
// as released (an earlier attempt of this activity released it, or the
// reconciler took it back): the run stops publishing either way.
func (a *Publish) ReleaseAggregate(ctx context.Context, in workflows.ReleaseInput) (workflows.ReleaseResult, error) {
	out, err := relaydb.Release(ctx, a.pool, in.AggregateType, in.AggregateID, in.Epoch)
	if err != nil {
		return workflows.ReleaseResult{}, fmt.Errorf("release %s/%s: %w", in.AggregateType, in.AggregateID, err)
	}
	res := workflows.ReleaseResult{Delivered: out.Delivered, HandedVersion: out.HandedVersion}
	switch {
	case out.Released:
		res.Released = true
		a.metrics.Handoff(metrics.ToLane, metrics.CauseReleased)
	case out.Busy:
		res.Busy = true
	default:
		res.Released, res.Owner = true, out.Owner.String()
	}
	return res, nil
}

// deliverEvent sends one event everywhere it goes: to the broker (unless
// its destinations skip it), then to its workflow destinations.
func (a *Publish) deliverEvent(ctx context.Context, id string, ev relaydb.PublishRow) error {
	p, err := a.targets.planFor(id, ev)
	if err != nil {
		return err
	}
	if p.broker {
		if err := a.send(ctx, id, ev); err != nil {
			return err
		}
	}
	return a.targets.deliver(ctx, id, ev, p)
}

// loadEvent reads an outbox row, classifying a row that cannot exist as
// non-retryable.
func loadEvent(ctx context.Context, pool *pgxpool.Pool, id string) (relaydb.PublishRow, error) {
	ev, err := relaydb.LoadForPublish(ctx, pool, id)
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

// send publishes the row to the broker and waits for the confirm,
// classifying failures by ErrType.
func (a *sender) send(ctx context.Context, id string, ev relaydb.PublishRow) error {
	_, err := a.broker.Publish(ctx, []delivery.Event{{ID: id, Row: ev}})
	return classifyPublish(err)
}

// classifyPublish turns a broker target's error (its delivery class) into
// the activity's error type.
// The message is the broker's, so the row's last_error and the log say what
// the broker said.
func classifyPublish(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, delivery.ErrTooLarge):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeTooLarge, err)
	case errors.Is(err, delivery.ErrRefused):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRefused, err)
	case errors.Is(err, delivery.ErrUnroutable):
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
	res.Delivered, err = relaydb.DeliveredVersion(ctx, a.pool, in.AggregateType, in.AggregateID)
	if err != nil {
		return res, fmt.Errorf("load cursor of %s/%s: %w", in.AggregateType, in.AggregateID, err)
	}
	if in.Settings {
		res.Settings = a.workflowSettings()
	}
	return res, nil
}

// noteError records cause as the row's last_error, with its class: the
// error type of an ApplicationError (the class a quarantine would give it),
// workflows.ErrClassUnknown for other errors.
func noteError(ctx context.Context, pool *pgxpool.Pool, id string, cause error) {
	// Detached: the activity's context may be the reason we are here.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	class := workflows.ErrClassUnknown
	var appErr *temporal.ApplicationError
	if errors.As(cause, &appErr) {
		class = cmp.Or(appErr.Type(), class)
	}
	if err := relaydb.NoteError(ctx, pool, id, class, pgtext.Truncate(cause.Error(), 1000)); err != nil {
		activity.GetLogger(ctx).Warn("could not record last_error", "event_id", id, "error", err)
	}
}
