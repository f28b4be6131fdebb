package ferry

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
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
// checked: New and the modules build the same components from it.

// newPublisher is the worker's RabbitMQ publisher; it dials on Connect.
// Without a broker (Config.NoBroker) it is nil.
func newPublisher(cfg Config) (*broker.Publisher, error) {
	if cfg.NoBroker {
		return nil, nil
	}
	return broker.New(broker.Config{URL: cfg.AMQPURL, Exchange: cfg.Exchange, DialTimeout: cfg.ConnectTimeout,
		MaxMessageBytes: cfg.MaxMessageBytes})
}

// workerParts are what the worker is built over besides its Config.
type workerParts struct {
	pool     *pgxpool.Pool
	temporal client.Client
	// pub is nil without a broker (Config.NoBroker).
	pub *broker.Publisher
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
	key, err := activities.RoutingKeyTemplate(cfg.RoutingKey)
	if err != nil {
		return worker.Config{}, err
	}
	effectRoutes, effectRegistrars, err := workerEffects(cfg.Effects, p.pool, p.m)
	if err != nil {
		return worker.Config{}, err
	}
	dests, err := cfg.destinations()
	if err != nil {
		return worker.Config{}, err
	}
	acts, err := activities.New(activities.Config{Pool: p.pool, Publisher: p.pub, NoBroker: cfg.NoBroker, Destinations: dests,
		Namespace: cfg.Namespace, Upcast: p.up, DataConverter: p.dc, RoutingKey: key, Effects: effectRoutes, Metrics: p.m,
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

// pollerConfig is the poller's configuration over pool and Temporal. Its
// signal window follows the idle timeout the workers give their runs.
func pollerConfig(cfg Config, pool *pgxpool.Pool, c client.Client, logger *slog.Logger) poller.Config {
	return poller.Config{
		Pool:         pool,
		Temporal:     c,
		TaskQueue:    cfg.TaskQueue,
		BatchSize:    cfg.BatchSize,
		Lease:        cfg.Lease,
		PollInterval: cfg.PollInterval,
		SignalWindow: cfg.IdleTimeout,
		StartMode:    cfg.StartMode,
		Logger:       logger,
	}
}

// walConfig is the log-tailing relay's settings, without its dependencies.
func walConfig(cfg Config) walrelay.Config {
	return walrelay.Config{Slot: cfg.WALSlot, Publication: cfg.WALPublication, CatchUpInterval: cfg.WALCatchUpInterval}
}

// workerEffects builds what the worker needs for the configured effects:
// the routes (activities.Config.Effects) and the registrars of the effect
// workflows and activities (worker.Config.Effects). Without routes both
// are nil. cfg was filled and checked by Config.WithDefaults.
func workerEffects(cfg EffectsConfig, pool *pgxpool.Pool, m *metrics.Metrics) (func(string, string) []workflows.EffectStart, []worker.Registrar, error) {
	if len(cfg.Routes) == 0 {
		return nil, nil, nil
	}
	router, err := cfg.router()
	if err != nil {
		return nil, nil, err
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
