package ferry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/upcast"
	"github.com/ferry-outbox/ferry/walrelay"
	"github.com/ferry-outbox/ferry/worker"
)

// Deps are what a service already has and lends to Ferry. Ferry never closes
// them.
type Deps struct {
	// Pool reaches the outbox tables. Required. With least-privilege roles
	// (schema/roles.sql) its role needs the relay's grants.
	Pool *pgxpool.Pool
	// Temporal is the client Ferry signals and polls with. Required.
	Temporal client.Client
	// Logger; default slog.Default().
	Logger *slog.Logger
	// DataConverter is the one Temporal was dialled with, when not
	// Temporal's default (a payload codec: codec.ClientOptions). Workflow
	// destinations encode their envelopes with it, since Ferry calls the
	// workflow API past the client's own converter. Nil: Temporal's
	// default.
	DataConverter converter.DataConverter
	// Upcast, when set, lifts payloads to their current schema version
	// before they reach workflow destinations (Config.Destinations); the
	// broker gets them as written. Nil: payloads as written.
	Upcast *upcast.Registry
	// Metrics, when set, takes Ferry's collectors (docs/operating.md, "Metrics, alerts, dashboard"): the
	// relay's and maintenance counters, and the backlog, its oldest age and
	// the table size read from Pool at scrape time. Your service's /metrics
	// serves them. Nil: no metrics.
	Metrics prometheus.Registerer
}

// Relay is a poller and/or a worker for services that do not use fx. It
// follows the usual contract: Start returns quickly, Stop waits and may be
// called more than once.
type Relay struct {
	cfg    Config
	poller *poller.Poller
	// wal, with Config.Source "wal", runs in the poller's place and
	// dispatches through it.
	wal    *walrelay.Relay
	worker *worker.Worker
	// broker is the worker's RabbitMQ target; nil without a worker or
	// without a broker (Config.NoBroker).
	broker *rabbitmq.Target
	// lane is the publish-first lane's RabbitMQ target (the poller's own),
	// or nil.
	lane *rabbitmq.Target
	// unregister takes Ferry's collectors off Deps.Metrics.
	unregister func()

	mu      sync.Mutex
	started bool
	stopped bool
}

// New fills cfg's defaults and checks it (Config.WithDefaults, once, by
// value), then builds the components roles asks for. It dials nothing;
// Start does.
func New(cfg Config, deps Deps, roles Roles) (_ *Relay, err error) {
	cfg, err = cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case deps.Pool == nil:
		return nil, errors.New("ferry: Deps.Pool is nil")
	case deps.Temporal == nil:
		return nil, errors.New("ferry: Deps.Temporal is nil")
	case !roles.Poller && !roles.Worker:
		return nil, errors.New("ferry: Roles: choose the poller, the worker or both")
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.Default()
	}
	r := &Relay{cfg: cfg, unregister: func() {}}
	var m *metrics.Metrics
	var mm *metrics.Maintenance
	if deps.Metrics != nil {
		if m, mm, r.unregister, err = registerMetrics(deps.Metrics, deps.Pool); err != nil {
			return nil, fmt.Errorf("ferry: Deps.Metrics: %w", err)
		}
	}
	defer func() {
		if err != nil {
			r.unregister() // a failed New leaves nothing behind
		}
	}()
	if roles.Worker {
		// Not dialled yet: Start connects it, and a publish redials.
		if r.broker, err = newBrokerTarget(cfg, nil, logger); err != nil {
			return nil, err
		}
		wcfg, err := workerConfig(cfg, workerParts{pool: deps.Pool, temporal: deps.Temporal, broker: r.broker,
			up: deps.Upcast, dc: deps.DataConverter, m: m, mm: mm})
		if err != nil {
			return nil, err
		}
		if r.worker, err = worker.New(wcfg); err != nil {
			return nil, err
		}
	}
	if roles.Poller {
		if r.lane, err = laneTarget(cfg, nil, logger); err != nil {
			return nil, err
		}
		pc, err := pollerConfig(cfg, deps.Pool, deps.Temporal, asTarget(r.lane), logger)
		if err != nil {
			return nil, err
		}
		pc.Metrics = m.Relay()
		if r.poller, err = poller.New(pc); err != nil {
			return nil, err
		}
		if cfg.Source == SourceWAL {
			wc := walConfig(cfg)
			wc.Pool, wc.Poller, wc.Logger = deps.Pool, r.poller, logger
			if r.wal, err = walrelay.New(wc); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// Start connects to RabbitMQ (worker) and starts the worker, then the
// poller. On error nothing is left running.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return errors.New("ferry: relay already started")
	}
	r.started = true
	if r.worker != nil {
		if r.broker != nil {
			cctx, cancel := context.WithTimeout(ctx, r.cfg.ConnectTimeout)
			defer cancel()
			if err := r.broker.Connect(cctx); err != nil {
				return fmt.Errorf("ferry: connect to RabbitMQ at %s: %w", broker.Redact(r.cfg.AMQPURL), err)
			}
		}
		if err := r.worker.Start(ctx); err != nil {
			r.stopLocked()
			return err
		}
	}
	switch {
	case r.wal != nil:
		if err := r.wal.Start(ctx); err != nil {
			r.stopLocked()
			return err
		}
	case r.poller != nil:
		if err := r.poller.Start(ctx); err != nil {
			r.stopLocked()
			return err
		}
	}
	return nil
}

// Stop stops the poller (its batch in hand finishes or waits out its
// lease), then the worker (running publishes finish), then closes the
// publisher. Safe to call more than once, and without Start.
func (r *Relay) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

func (r *Relay) stopLocked() {
	if r.stopped {
		return
	}
	r.stopped = true
	switch {
	case r.wal != nil:
		r.wal.Stop()
	case r.poller != nil:
		r.poller.Stop()
	}
	if r.worker != nil {
		r.worker.Stop()
	}
	for _, t := range []*rabbitmq.Target{r.lane, r.broker} {
		if t != nil {
			_ = t.Close()
		}
	}
	r.unregister()
}
