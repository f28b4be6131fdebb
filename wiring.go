package ferry

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/effects/email"
	"github.com/ferry-outbox/ferry/effects/payment"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/upcast"
	"github.com/ferry-outbox/ferry/walrelay"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

// The components' configs from a Config that WithDefaults filled and
// checked: New and the modules build the same components from it, with the
// routes and templates WithDefaults parsed (Config.parsed).

// newBrokerTarget is the RabbitMQ target (Ferry's message contract,
// package delivery/rabbitmq) over a publisher of its own, which dials on
// Connect or on the first publish. A configuration without a broker
// (Config.NoBroker) has none: nil. tp and logger may be nil (the
// target's defaults).
func newBrokerTarget(cfg Config, tp trace.TracerProvider, logger *slog.Logger) (*rabbitmq.Target, error) {
	return newBrokerTargetWith(cfg, tp, logger, 0)
}

// newBrokerTargetWith is newBrokerTarget with the publisher's heartbeat
// (0: broker's default).
func newBrokerTargetWith(cfg Config, tp trace.TracerProvider, logger *slog.Logger, heartbeat time.Duration) (*rabbitmq.Target, error) {
	if cfg.NoBroker {
		return nil, nil
	}
	f, err := cfg.parsed()
	if err != nil {
		return nil, err
	}
	pub, err := broker.New(broker.Config{URL: cfg.AMQPURL, Exchange: cfg.Exchange, DialTimeout: cfg.ConnectTimeout,
		MaxMessageBytes: cfg.MaxMessageBytes, Heartbeat: heartbeat})
	if err != nil {
		return nil, err
	}
	return rabbitmq.New(rabbitmq.Config{Publisher: pub, RoutingKey: f.routingKey, TracerProvider: tp, Logger: logger})
}

// asTarget is t as a delivery.Target: nil (no broker) when t is.
func asTarget(t *rabbitmq.Target) delivery.Target {
	if t == nil {
		return nil
	}
	return t
}

// workerParts are what the worker is built over besides its Config.
type workerParts struct {
	pool     *pgxpool.Pool
	temporal client.Client
	// broker is nil without a broker (Config.NoBroker).
	broker *rabbitmq.Target
	// up and dc may be nil: no upcasting, Temporal's default converter.
	up *upcast.Registry
	dc converter.DataConverter
	// m and mm may be nil: nothing counted.
	m  *metrics.Metrics
	mm *metrics.Maintenance
	// tp, when nil, is the global provider (activities' default).
	tp trace.TracerProvider
}

// workerConfig is the worker's configuration over p.
func workerConfig(cfg Config, p workerParts) (worker.Config, error) {
	f, err := cfg.parsed()
	if err != nil {
		return worker.Config{}, err
	}
	effectRoutes, effectRegistrars, err := workerEffects(cfg.Effects, f.effects, p.pool, p.m)
	if err != nil {
		return worker.Config{}, err
	}
	acts, err := activities.New(activities.Config{Pool: p.pool, Broker: asTarget(p.broker), Destinations: f.destinations,
		Namespace: cfg.Namespace, Upcast: p.up, DataConverter: p.dc, Effects: effectRoutes, Metrics: p.m,
		MaintenanceMetrics: p.mm, Temporal: p.temporal, TracerProvider: p.tp})
	if err != nil {
		return worker.Config{}, err
	}
	wc := worker.Config{Temporal: p.temporal, Activities: acts, TaskQueue: cfg.TaskQueue, Namespace: cfg.Namespace,
		Effects: effectRegistrars, WorkflowTaskPollers: cfg.WorkflowTaskPollers, Workflow: workflowSettings(cfg)}
	if !cfg.NoSchedules {
		wc.Schedules = &worker.Schedules{
			Retention: workflows.RetentionInput{RowAge: cfg.RowRetention, PayloadAge: cfg.PayloadRetention},
			Reconcile: workflows.ReconcileInput{DriftSample: cfg.DriftSample},
		}
	}
	return wc, nil
}

// workflowSettings are the aggregate workflow's settings: the worker owns
// them and hands them to every run at its start (workflows.Settings).
func workflowSettings(cfg Config) workflows.Settings {
	return workflows.Settings{
		IdleTimeout:      cfg.IdleTimeout,
		PublishBatchSize: cfg.PublishBatchSize,
		MaxBlockedRefs:   cfg.MaxBlockedRefs,
		Policies:         cfg.Policies,
	}
}

// pollerConfig is the poller's configuration over pool, Temporal and, in
// the publish-first lane, the target it publishes to (nil otherwise). Its
// signal window follows the idle timeout the workers give their runs.
func pollerConfig(cfg Config, pool *pgxpool.Pool, c client.Client, target delivery.Target, logger *slog.Logger) (poller.Config, error) {
	pc := poller.Config{
		Pool:         pool,
		Temporal:     c,
		TaskQueue:    cfg.TaskQueue,
		BatchSize:    cfg.BatchSize,
		Lease:        cfg.Lease,
		PollInterval: cfg.PollInterval,
		SignalWindow: cfg.IdleTimeout,
		StartMode:    cfg.StartMode,
		Lane:         cfg.Lane,
		Source:       cfg.Source,
		Logger:       logger,
	}
	if cfg.Lane != LanePublishFirst {
		return pc, nil
	}
	f, err := cfg.parsed()
	if err != nil {
		return pc, err
	}
	pc.Target, pc.NeedsWorkflow = target, needsWorkflow(f.destinations, f.effects)
	return pc, nil
}

// needsWorkflow says which event types the publish-first lane hands to
// their aggregate's workflow: those with effects (fx, nil: none) or
// workflow destinations, which only the workflow starts or delivers.
func needsWorkflow(dests *destination.Router, fx *effects.Router) func(aggregateType, eventType string) bool {
	if dests.Len() == 0 && fx == nil {
		return func(string, string) bool { return false }
	}
	return func(aggregateType, eventType string) bool {
		routes, _ := dests.For(aggregateType, eventType)
		return len(routes) > 0 || fx != nil && len(fx.For(aggregateType, eventType)) > 0
	}
}

// laneTarget is the publish-first lane's RabbitMQ target, over a
// publisher of the poller's own (it dials on the first publish), or nil in
// the workflow lane.
func laneTarget(cfg Config, tp trace.TracerProvider, logger *slog.Logger) (*rabbitmq.Target, error) {
	if cfg.Lane != LanePublishFirst {
		return nil, nil
	}
	// A publisher of its own, with a heartbeat from the lease (the lane's
	// publish budget counts on the broker dropping a silent connection in
	// time: poller.LaneHeartbeat).
	return newBrokerTargetWith(cfg, tp, logger, poller.LaneHeartbeat(cfg.Lease))
}

// walConfig is the log-tailing relay's settings, without its dependencies.
func walConfig(cfg Config) walrelay.Config {
	return walrelay.Config{Slot: cfg.WALSlot, Publication: cfg.WALPublication, CatchUpInterval: cfg.WALCatchUpInterval}
}

// workerEffects builds what the worker needs for the configured effects:
// the routes (activities.Config.Effects) and the registrars of the effect
// workflows and activities (worker.Config.Effects). Without routes (router
// nil) both are nil. cfg and router are what Config.WithDefaults filled
// and parsed.
func workerEffects(cfg EffectsConfig, router *effects.Router, pool *pgxpool.Pool, m *metrics.Metrics) (func(string, string) []workflows.EffectStart, []worker.Registrar, error) {
	if router == nil {
		return nil, nil, nil
	}
	regs := []worker.Registrar{effects.Workflows{}}
	if cfg.PaymentsURL != "" {
		c, err := payment.New(payment.Config{BaseURL: cfg.PaymentsURL, APIKey: cfg.PaymentsAPIKey, Timeout: cfg.PaymentsTimeout})
		if err != nil {
			return nil, nil, err
		}
		var pm *payment.Metrics
		if reg := m.Registerer(); reg != nil {
			if pm, err = payment.NewMetrics(reg); err != nil {
				return nil, nil, err
			}
		}
		acts, err := payment.NewActivities(payment.ActivitiesConfig{Client: c, Pool: pool, Metrics: pm, AmountField: cfg.PaymentAmountField})
		if err != nil {
			return nil, nil, err
		}
		regs = append(regs, acts)
	}
	if cfg.SMTPAddress != "" {
		var em *email.Metrics
		if reg := m.Registerer(); reg != nil {
			var err error
			if em, err = email.NewMetrics(reg); err != nil {
				return nil, nil, err
			}
		}
		acts, err := email.NewActivities(email.Config{Pool: pool, SMTPAddress: cfg.SMTPAddress, From: cfg.SMTPFrom, Ambiguous: cfg.EmailAmbiguous, Metrics: em})
		if err != nil {
			return nil, nil, err
		}
		regs = append(regs, acts)
	}
	return router.For, regs, nil
}
