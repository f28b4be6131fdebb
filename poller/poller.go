package poller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/internal/backoff"
	"github.com/ferry-outbox/ferry/internal/startstop"
	"github.com/ferry-outbox/ferry/internal/testhook"
	"github.com/ferry-outbox/ferry/workflows"
)

// Channel is the NOTIFY channel the schema's insert trigger fires.
const Channel = "ferry_outbox"

// Defaults and limits of Config, which package ferry's Config takes too.
const (
	DefaultBatchSize = 200
	MaxBatchSize     = 10000
	DefaultLease     = 30 * time.Second
	// DefaultSignalTimeout and DefaultMarkTimeout add up to what Lease
	// must exceed.
	DefaultSignalTimeout      = 5 * time.Second
	DefaultMarkTimeout        = 5 * time.Second
	DefaultPollInterval       = time.Second
	MinPollInterval           = 10 * time.Millisecond
	DefaultConcurrency        = 16
	DefaultMaxBackoff         = 30 * time.Second
	DefaultMaxRefusedAttempts = 3
	DefaultStartMode          = StartOneShot
	DefaultLane               = LaneWorkflow
	// DefaultSource names a claiming relay in the fleet's registry; package
	// walrelay's relays register as "wal".
	DefaultSource = "poll"
)

// Config configures a Poller.
type Config struct {
	// Pool reaches the outbox. Required. LISTEN uses one extra, dedicated
	// connection built from the pool's config (it must be a direct
	// connection: a transaction-mode PgBouncer drops notifications).
	Pool *pgxpool.Pool
	// Temporal is the client to signal with. Required.
	Temporal client.Client
	// TaskQueue of the aggregate workflows. Default "ferry".
	TaskQueue string
	// Name identifies this poller in outbox_events.claimed_by. Default
	// "<hostname>-<pid>".
	Name string
	// BatchSize is how many of the oldest claimable rows one claim takes;
	// it adds up to 4×BatchSize later rows of the same aggregates, so each
	// signal carries an aggregate's backlog. Signals per claim are at most
	// BatchSize. Default 200.
	BatchSize int
	// Lease is how long claimed rows stay invisible to other pollers. It
	// must exceed SignalTimeout + MarkTimeout, or another poller could claim
	// and signal a row while this one still works on it. Default 30s.
	Lease time.Duration
	// SignalTimeout bounds one signal-with-start. Default 5s.
	SignalTimeout time.Duration
	// MarkTimeout bounds marking a batch dispatched. Default 5s.
	MarkTimeout time.Duration
	// PollInterval is the fallback poll when no NOTIFY arrives; it is also the
	// most a NOTIFY lost during a reconnect can delay a row. Default 1s.
	PollInterval time.Duration
	// Concurrency is how many signals are in flight at once. Default 16.
	Concurrency int
	// MaxBackoff caps the wait after failures (per row and for the loop).
	// Default 30s.
	MaxBackoff time.Duration
	// SignalWindow is how long after dispatching an aggregate this poller
	// takes its run to be still open: within it, the aggregate's events go
	// by Signal-With-Start; after it, StartMode decides. Set it to the
	// workers' idle timeout (worker.Config.Workflow.IdleTimeout), which the
	// runs themselves follow: a window longer than it costs a refused
	// one-shot start now and then, a shorter one a new keep-alive run where
	// a signal would have done. Default workflows.DefaultIdleTimeout (1m).
	//
	// The aggregate workflow's settings (idle timeout, history length,
	// batch size, blocked-reference bound, policies) are not the poller's:
	// the worker owns them (worker.Config.Workflow).
	SignalWindow time.Duration
	// StartMode is how an aggregate that this poller has not dispatched
	// within SignalWindow gets its events: StartOneShot (default) starts a
	// one-shot run with the events in its input (eagerly, when a worker of
	// the task queue shares the client), which completes as soon as it has
	// published them; StartKeepAlive signals-with-start a run that idles
	// for the workers' idle timeout. Aggregates dispatched within
	// SignalWindow always get Signal-With-Start, so a busy aggregate keeps
	// one run.
	StartMode string
	// MaxRefusedAttempts is how many claims of a row end in a start or
	// signal that Temporal refuses as invalid (InvalidArgument: a request
	// that can never succeed as it is, as opposed to Unavailable or a
	// timeout) before the row is quarantined with Temporal's reason. It is
	// then listed by `ferry status` and `ferry blocked`, counted in
	// ferry_events_quarantined_total{error_class="TemporalRefused"}, and
	// given up (or re-queued) with `ferry repair`. Attempts are counted at
	// claim time. Default 3.
	MaxRefusedAttempts int
	// Lane is how this relay delivers: LaneWorkflow (default) hands every
	// event to its aggregate's workflow; LanePublishFirst publishes events
	// to Target itself and hands an aggregate to its workflow only when it
	// needs one (lane.go). Every relay of one outbox runs the same lane:
	// Start refuses a relay of the other one (fleet.go).
	Lane string
	// Target is where LanePublishFirst publishes (rabbitmq.Target, with
	// the worker's broker settings). Required with LanePublishFirst,
	// unused otherwise.
	Target delivery.Target
	// NeedsWorkflow says whether an event type must go through its
	// aggregate's workflow in LanePublishFirst: one that starts effects
	// or goes to workflow destinations. The lane hands the aggregate over
	// at such an event. Default: none does.
	NeedsWorkflow func(aggregateType, eventType string) bool
	// Source names how this relay finds rows, for the fleet's registry
	// (ferry_relays): "poll" (default) or "wal" (package walrelay sets it).
	Source string

	// Metrics counts claims, signal failures, batch durations, refused
	// events and dispatches (a *metrics.Relay is one); nil counts nothing.
	Metrics Metrics
	// Logger; default slog.Default().
	Logger *slog.Logger
	// TracerProvider starts a ferry.dispatch span per signal-with-start,
	// continuing the trace stored with the signalled rows (see dispatchSpan).
	// Default: the global provider (otel.GetTracerProvider(); a no-op until
	// one is set).
	TracerProvider trace.TracerProvider

	// unsafeShortLease lifts the rule that Lease exceed SignalTimeout +
	// MarkTimeout and stops bounding a batch's signals by the lease. Only
	// tests set it, through testhook.PollerShortLease: the fault suite's
	// negative control proves with it that its checker sees duplicate
	// signals.
	unsafeShortLease bool
}

func init() {
	testhook.PollerShortLease = func(cfg any) any {
		c := cfg.(Config)
		c.unsafeShortLease = true
		return c
	}
}

// Poller relays pending outbox rows to aggregate workflows.
type Poller struct {
	cfg     Config
	log     *slog.Logger
	tracer  trace.Tracer
	metrics Metrics // cfg.Metrics, or noMetrics

	run    startstop.Runner
	wake   chan struct{}
	recent *recentSet
	// pause holds the publish-first lane after a broker-wide failure.
	pause     lanePause
	ownedWake chan struct{} // wakes ServeOwned
	fleet     *fleetMember
}

// Start modes (Config.StartMode).
const (
	StartOneShot   = "one-shot"
	StartKeepAlive = "keep-alive"
)

// New validates cfg and fills its defaults.
func New(cfg Config) (*Poller, error) {
	cfg = cfg.withDefaults()
	if cfg.Pool == nil {
		return nil, errors.New("poller: Config.Pool is nil")
	}
	if cfg.Temporal == nil {
		return nil, errors.New("poller: Config.Temporal is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Lane == LanePublishFirst && cfg.Target == nil {
		return nil, errors.New("poller: Config.Target is nil: the publish-first lane publishes to it (the broker settings)")
	}
	var m Metrics = noMetrics{}
	if cfg.Metrics != nil {
		m = cfg.Metrics
	}
	p := &Poller{cfg: cfg, metrics: m, log: cfg.Logger.With("component", "poller", "poller", cfg.Name), wake: make(chan struct{}, 1),
		ownedWake: make(chan struct{}, 1),
		tracer:    cfg.TracerProvider.Tracer("github.com/ferry-outbox/ferry/poller"),
		recent:    newRecentSet(cfg.SignalWindow, recentMax)}
	p.fleet = newFleetMember(p)
	return p, nil
}

func (cfg Config) withDefaults() Config {
	host, _ := os.Hostname()
	cfg.TaskQueue = cmp.Or(cfg.TaskQueue, workflows.DefaultTaskQueue)
	cfg.Name = cmp.Or(cfg.Name, fmt.Sprintf("%s-%d", cmp.Or(host, "poller"), os.Getpid()))
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.SignalTimeout = cmp.Or(cfg.SignalTimeout, DefaultSignalTimeout)
	cfg.MarkTimeout = cmp.Or(cfg.MarkTimeout, DefaultMarkTimeout)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, DefaultMaxBackoff)
	cfg.StartMode = cmp.Or(cfg.StartMode, DefaultStartMode)
	cfg.MaxRefusedAttempts = cmp.Or(cfg.MaxRefusedAttempts, DefaultMaxRefusedAttempts)
	cfg.SignalWindow = cmp.Or(cfg.SignalWindow, workflows.DefaultIdleTimeout)
	cfg.Lane = cmp.Or(cfg.Lane, DefaultLane)
	cfg.Source = cmp.Or(cfg.Source, DefaultSource)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	return cfg
}

// Validate checks the settings (zero fields count as their defaults) but
// not the dependencies, so a command can reject bad flags before it dials
// anything.
func (cfg Config) Validate() error {
	cfg = cfg.withDefaults()
	switch {
	case cfg.BatchSize < 1 || cfg.BatchSize > MaxBatchSize:
		return fmt.Errorf("poller: Config.BatchSize %d: must be 1 to %d", cfg.BatchSize, MaxBatchSize)
	case cfg.Concurrency < 1:
		return fmt.Errorf("poller: Config.Concurrency %d: must be at least 1", cfg.Concurrency)
	case cfg.Lease <= 0:
		return fmt.Errorf("poller: Config.Lease %s: must be positive", cfg.Lease)
	case cfg.Lease <= cfg.SignalTimeout+cfg.MarkTimeout && !cfg.unsafeShortLease:
		// dispatch ends every signal of a batch by Lease - MarkTimeout after
		// the claim, so the mark lands inside the lease; this leaves room
		// for at least one full signal.
		return fmt.Errorf("poller: Config.Lease %s must exceed SignalTimeout %s + MarkTimeout %s",
			cfg.Lease, cfg.SignalTimeout, cfg.MarkTimeout)
	case cfg.PollInterval < MinPollInterval:
		return fmt.Errorf("poller: Config.PollInterval %s: must be at least %s", cfg.PollInterval, MinPollInterval)
	case cfg.SignalWindow < 0:
		return fmt.Errorf("poller: Config.SignalWindow %s: must not be negative", cfg.SignalWindow)
	case cfg.MaxRefusedAttempts < 1:
		return fmt.Errorf("poller: Config.MaxRefusedAttempts %d: must be at least 1", cfg.MaxRefusedAttempts)
	case cfg.StartMode != StartOneShot && cfg.StartMode != StartKeepAlive:
		return fmt.Errorf("poller: Config.StartMode %q: use %q or %q", cfg.StartMode, StartOneShot, StartKeepAlive)
	case cfg.Lane != LaneWorkflow && cfg.Lane != LanePublishFirst:
		return fmt.Errorf("poller: Config.Lane %q: use %q or %q", cfg.Lane, LaneWorkflow, LanePublishFirst)
	case cfg.Lane == LanePublishFirst && (cfg.Lease <= cfg.MarkTimeout+brokerCloseWait+time.Second || cfg.Lease <= LaneHeartbeat(cfg.Lease)*7/2+time.Second):
		return fmt.Errorf("poller: Config.Lease %s is too short for the publish-first lane: it must leave at least 1s to publish after MarkTimeout %s, the broker's close (%s) and 3.5 heartbeats (%s)",
			cfg.Lease, cfg.MarkTimeout, brokerCloseWait, LaneHeartbeat(cfg.Lease))
	}
	return nil
}

// Start joins the fleet of this outbox's relays (refused, naming the
// other relay, when one of the other lane runs), then starts the loop and
// the listener and returns.
func (p *Poller) Start(ctx context.Context) error {
	if err := p.JoinFleet(ctx); err != nil {
		return err
	}
	err := p.run.Start(ctx, func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Go(func() { p.listen(ctx) })
		wg.Go(func() { p.loop(ctx) })
		wg.Go(func() { p.ServeOwned(ctx) })
		wg.Wait()
	})
	if err != nil {
		p.LeaveFleet()
		return fmt.Errorf("poller: %w", err)
	}
	return nil
}

// Stop ends the loop and waits for the batch in hand to finish (its rows are
// either marked or left to their lease), then leaves the fleet. Safe to
// call more than once.
func (p *Poller) Stop() {
	p.run.Stop()
	p.LeaveFleet()
}

func (p *Poller) loop(ctx context.Context) {
	ticker := time.NewTicker(p.cfg.PollInterval)
	defer ticker.Stop()
	trailing := time.NewTimer(time.Hour)
	trailing.Stop()
	failures := 0
	for {
		err := p.drain(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := time.Duration(0)
		if err != nil {
			failures++
			wait = backoff.Exponential(retryBase, p.cfg.MaxBackoff, failures)
			p.log.Warn("relay round failed; rows stay pending and are retried", "error", err, "retry_in", wait)
		} else {
			failures = 0
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
			// Producers that overlapped the notifying transaction skipped
			// their own NOTIFY (schema 0004); their rows may commit just
			// after this wake-up's claim. One short trailing claim takes them.
			trailing.Reset(trailingClaim)
		case <-trailing.C:
		case <-ticker.C:
		}
	}
}

// trailingClaim is how long after a wake-up the poller claims once more.
const trailingClaim = 50 * time.Millisecond

// drain relays batches until one comes back short.
func (p *Poller) drain(ctx context.Context) error {
	_, err := p.Drain(ctx)
	return err
}

// round is one claim round of the workflow lane (the publish-first
// lane's claim pass is drainDirect); again says another round would find
// more.
func (p *Poller) round(ctx context.Context) (int, bool, error) {
	n, err := p.runWorkflowOnce(ctx)
	return n, n >= p.cfg.BatchSize, err
}

// retryBase is the first wait of the loop's and the listener's backoff
// after a failure; it doubles up to MaxBackoff.
const retryBase = 500 * time.Millisecond
