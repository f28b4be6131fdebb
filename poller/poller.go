package poller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/internal/backoff"
	"github.com/ferry-outbox/ferry/internal/failpoint"
	"github.com/ferry-outbox/ferry/internal/pgtext"
	"github.com/ferry-outbox/ferry/internal/startstop"
	"github.com/ferry-outbox/ferry/internal/testhook"
	"github.com/ferry-outbox/ferry/workflows"
)

// Channel is the NOTIFY channel the schema's insert trigger fires.
const Channel = "ferry_outbox"

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
	var m Metrics = noMetrics{}
	if cfg.Metrics != nil {
		m = cfg.Metrics
	}
	return &Poller{cfg: cfg, metrics: m, log: cfg.Logger.With("component", "poller", "poller", cfg.Name), wake: make(chan struct{}, 1),
		tracer: cfg.TracerProvider.Tracer("github.com/ferry-outbox/ferry/poller"),
		recent: newRecentSet(cfg.SignalWindow, recentMax)}, nil
}

func (cfg Config) withDefaults() Config {
	host, _ := os.Hostname()
	cfg.TaskQueue = cmp.Or(cfg.TaskQueue, "ferry")
	cfg.Name = cmp.Or(cfg.Name, fmt.Sprintf("%s-%d", cmp.Or(host, "poller"), os.Getpid()))
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 200)
	cfg.Lease = cmp.Or(cfg.Lease, 30*time.Second)
	cfg.SignalTimeout = cmp.Or(cfg.SignalTimeout, 5*time.Second)
	cfg.MarkTimeout = cmp.Or(cfg.MarkTimeout, 5*time.Second)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 16)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 30*time.Second)
	cfg.StartMode = cmp.Or(cfg.StartMode, StartOneShot)
	cfg.MaxRefusedAttempts = cmp.Or(cfg.MaxRefusedAttempts, 3)
	cfg.SignalWindow = cmp.Or(cfg.SignalWindow, workflows.DefaultIdleTimeout)
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
	case cfg.BatchSize < 1 || cfg.BatchSize > 10000:
		return fmt.Errorf("poller: Config.BatchSize %d: must be 1 to 10000", cfg.BatchSize)
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
	case cfg.PollInterval < 10*time.Millisecond:
		return fmt.Errorf("poller: Config.PollInterval %s: must be at least 10ms", cfg.PollInterval)
	case cfg.SignalWindow < 0:
		return fmt.Errorf("poller: Config.SignalWindow %s: must not be negative", cfg.SignalWindow)
	case cfg.MaxRefusedAttempts < 1:
		return fmt.Errorf("poller: Config.MaxRefusedAttempts %d: must be at least 1", cfg.MaxRefusedAttempts)
	case cfg.StartMode != StartOneShot && cfg.StartMode != StartKeepAlive:
		return fmt.Errorf("poller: Config.StartMode %q: use %q or %q", cfg.StartMode, StartOneShot, StartKeepAlive)
	}
	return nil
}

// Start starts the loop and the listener and returns at once.
func (p *Poller) Start(ctx context.Context) error {
	err := p.run.Start(ctx, func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); p.listen(ctx) }()
		go func() { defer wg.Done(); p.loop(ctx) }()
		wg.Wait()
	})
	if err != nil {
		return fmt.Errorf("poller: %w", err)
	}
	return nil
}

// Stop ends the loop and waits for the batch in hand to finish (its rows are
// either marked or left to their lease). Safe to call more than once.
func (p *Poller) Stop() { p.run.Stop() }

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
	for {
		n, err := p.RunOnce(ctx)
		if err != nil || n < p.cfg.BatchSize {
			return err
		}
	}
}

// Claimed is one claimed outbox row.
type claimed struct {
	id, aggType, aggID, eventType string
	version                       int64
	attempts                      int    // claims so far, this one included
	traceParent, traceState       string // W3C, stored by the producer; may be empty
}

// sqlClaim takes the oldest claimable pending rows ($1 of them), plus up to
// $4 more claimable rows of the same aggregates, so that one signal carries
// an aggregate's whole backlog instead of one event per claim: a burst
// interleaved over many aggregates costs a signal per aggregate, not per
// event. SKIP LOCKED lets pollers claim disjoint rows at once (rows of one
// aggregate may then go to two pollers; the workflow orders them); the
// lease (next_attempt_at moved forward) keeps them invisible after this
// statement's locks are gone; attempts counts the claim itself, so a row
// that crashes its relay still counts. The extension reads the unique
// (aggregate, version) index from the delivered version up, never the
// aggregate's delivered history.
const sqlClaim = `
WITH picked AS (
    SELECT id, aggregate_type, aggregate_id FROM outbox_events
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), more AS (
    SELECT e.id FROM (SELECT DISTINCT aggregate_type, aggregate_id FROM picked) p
    JOIN outbox_aggregates a ON a.aggregate_type = p.aggregate_type AND a.aggregate_id = p.aggregate_id
    JOIN outbox_events e ON e.aggregate_type = p.aggregate_type AND e.aggregate_id = p.aggregate_id
        AND e.aggregate_version > a.delivered_version
    WHERE e.status = 'pending' AND e.next_attempt_at <= now()
      AND e.id NOT IN (SELECT id FROM picked)
    ORDER BY e.next_attempt_at
    LIMIT $4
    FOR UPDATE OF e SKIP LOCKED
)
UPDATE outbox_events e
SET attempts = e.attempts + 1, next_attempt_at = now() + $2::interval, claimed_by = $3
WHERE e.id IN (SELECT id FROM picked UNION ALL SELECT id FROM more)
RETURNING e.id::text, e.aggregate_type, e.aggregate_id, e.aggregate_version, e.event_type,
    coalesce(e.trace_parent, ''), coalesce(e.trace_state, ''), e.attempts`

// claimExtension: a claim takes up to this many times BatchSize later rows
// of the aggregates its BatchSize oldest rows belong to.
const claimExtension = 4

// sqlMarkDispatched: only after Temporal accepted the signal. A row the
// workflow already published stays published, and one a blocked workflow
// handed back before the signal returned (workflows.HeldPrefix) stays
// pending, or nothing would claim it again.
const sqlMarkDispatched = `
UPDATE outbox_events SET status = 'dispatched', dispatched_at = now(), last_error = NULL
WHERE id = ANY($1::uuid[]) AND status = 'pending' AND coalesce(last_error, '') NOT LIKE '` + workflows.HeldPrefix + `%'`

// sqlRelease gives rows whose signal failed back, after an exponential
// backoff by attempts (1s, 2s, 4s… capped).
const sqlRelease = `
UPDATE outbox_events
SET next_attempt_at = now() + LEAST(make_interval(secs => power(2, LEAST(attempts - 1, 20))), $2::interval),
    last_error = $3
WHERE id = ANY($1::uuid[]) AND status = 'pending'`

// sqlQuarantineRefused takes rows out of the claim for good: Temporal
// refused their start or signal as invalid MaxRefusedAttempts times. No
// workflow holds them; `ferry repair` skips or re-queues them.
const sqlQuarantineRefused = `
UPDATE outbox_events SET status = 'quarantined', last_error = $2
WHERE id = ANY($1::uuid[]) AND status = 'pending'
RETURNING event_type`

// ErrClassTemporalRefused is the error class of a row quarantined because
// Temporal refused its start or signal as invalid (Config.MaxRefusedAttempts).
const ErrClassTemporalRefused = "TemporalRefused"

// refused says whether Temporal refused a request as invalid: it fails the
// same way however often it is sent. Unavailable, DeadlineExceeded,
// ResourceExhausted and the like are outages and stay retryable.
func refused(err error) bool {
	var invalid *serviceerror.InvalidArgument
	return errors.As(err, &invalid)
}

// RunOnce claims one batch, signals its aggregates and marks what Temporal
// accepted. It returns the number of rows claimed. Aggregates whose signal
// failed keep their rows pending; the error then says how many failed.
func (p *Poller) RunOnce(ctx context.Context) (int, error) {
	start := time.Now()
	rows, err := p.cfg.Pool.Query(ctx, sqlClaim, p.cfg.BatchSize, p.cfg.Lease, p.cfg.Name, p.cfg.BatchSize*claimExtension)
	if err != nil {
		return 0, fmt.Errorf("claim outbox batch: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
		var c claimed
		err := r.Scan(&c.id, &c.aggType, &c.aggID, &c.version, &c.eventType, &c.traceParent, &c.traceState, &c.attempts)
		return c, err
	})
	if err != nil {
		return 0, fmt.Errorf("claim outbox batch: %w", err)
	}
	if len(batch) == 0 {
		return 0, nil
	}
	failpoint.Inject("poller.after-claim")
	groups := group(batch)
	// Every signal must be done before the lease can run out, or another
	// poller could claim the same rows while this one still signals.
	dctx, dcancel := context.WithTimeout(ctx, p.cfg.Lease-p.cfg.MarkTimeout)
	if p.cfg.unsafeShortLease {
		dctx, dcancel = context.WithCancel(ctx)
	}
	ok, failed := p.dispatch(dctx, groups)
	dcancel()
	failpoint.Inject("poller.after-signal")

	// Detached: marking must happen even when Stop cancelled ctx while the
	// signals were in flight, or every signalled row waits out its lease.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.MarkTimeout)
	defer cancel()
	if len(ok) > 0 {
		if _, err := p.cfg.Pool.Exec(mctx, sqlMarkDispatched, ok); err != nil {
			// The workflows have the events; the rows come back after the
			// lease and are re-signalled, and the workflows drop them.
			return len(batch), fmt.Errorf("mark %d rows dispatched: %w", len(ok), err)
		}
	}
	var firstErr error
	for _, f := range failed {
		firstErr = cmp.Or(firstErr, f.err)
		release := f.ids
		if refused(f.err) {
			release = p.quarantineRefused(mctx, f)
		}
		if len(release) == 0 {
			continue
		}
		if _, err := p.cfg.Pool.Exec(mctx, sqlRelease, release, p.cfg.MaxBackoff, pgtext.Truncate(f.err.Error(), 1000)); err != nil {
			p.log.Warn("could not release rows; they return after the lease", "aggregate", f.workflowID, "error", err)
		}
	}
	p.metrics.Batch(len(batch), len(failed), time.Since(start))
	p.log.Debug("relayed batch", "claimed", len(batch), "aggregates", len(groups), "signalled", len(ok), "failed_aggregates", len(failed))
	if len(failed) > 0 {
		return len(batch), fmt.Errorf("signal %d of %d aggregates (first error: %w)", len(failed), len(groups), firstErr)
	}
	return len(batch), nil
}

// quarantineRefused quarantines the rows of f that Temporal refused as
// invalid on their MaxRefusedAttempts-th claim (or later), with Temporal's
// reason, and returns the ids of the others, which are released as usual.
func (p *Poller) quarantineRefused(ctx context.Context, f failure) (release []string) {
	var give []claimed
	for _, r := range f.rows {
		if r.attempts >= p.cfg.MaxRefusedAttempts {
			give = append(give, r)
		} else {
			release = append(release, r.id)
		}
	}
	if len(give) == 0 {
		return release
	}
	ids := make([]string, len(give))
	for i, r := range give {
		ids[i] = r.id
	}
	msg := pgtext.Truncate(fmt.Sprintf("quarantined (%s): Temporal refused it as invalid %d times, so it can never be delivered as it is: %v",
		ErrClassTemporalRefused, give[0].attempts, f.err), 1000)
	rows, err := p.cfg.Pool.Query(ctx, sqlQuarantineRefused, ids, msg)
	var types []string
	if err == nil {
		types, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		// Released instead: the next claim counts another attempt and
		// tries to quarantine them again.
		p.log.Warn("could not quarantine rows Temporal refused", "aggregate", f.workflowID, "error", err)
		return append(release, ids...)
	}
	for _, t := range types {
		p.metrics.Quarantined(t, ErrClassTemporalRefused)
	}
	p.log.Warn("Temporal refused the events as invalid; quarantined them (ferry blocked lists them, ferry repair skips them)",
		"aggregate", f.workflowID, "events", len(ids), "attempts", give[0].attempts, "error", f.err)
	return release
}

type aggregateGroup struct {
	aggType, aggID string
	events         []workflows.EventRef
	ids            []string
	rows           []claimed // for the dispatch span's parent and links
}

// group splits a batch per aggregate, versions ascending, aggregates in the
// order they first appear (oldest first).
func group(batch []claimed) []*aggregateGroup {
	byKey := map[string]*aggregateGroup{}
	var out []*aggregateGroup
	for _, c := range batch {
		key := c.aggType + "\x00" + c.aggID
		g := byKey[key]
		if g == nil {
			g = &aggregateGroup{aggType: c.aggType, aggID: c.aggID}
			byKey[key] = g
			out = append(out, g)
		}
		g.events = append(g.events, workflows.EventRef{ID: c.id, Version: c.version, Type: c.eventType})
		g.ids = append(g.ids, c.id)
		g.rows = append(g.rows, c)
	}
	for _, g := range out {
		slices.SortFunc(g.events, func(a, b workflows.EventRef) int { return cmp.Compare(a.Version, b.Version) })
	}
	return out
}

type failure struct {
	workflowID string
	ids        []string
	rows       []claimed
	err        error
}

// dispatch signals every group, Concurrency at a time. One aggregate's
// failure never stops the others.
func (p *Poller) dispatch(ctx context.Context, groups []*aggregateGroup) (ok []string, failed []failure) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, p.cfg.Concurrency)
	)
	for _, g := range groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := p.signal(ctx, g)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, failure{workflowID: workflows.WorkflowID(g.aggType, g.aggID), ids: g.ids, rows: g.rows, err: err})
				return
			}
			ok = append(ok, g.ids...)
		}()
	}
	wg.Wait()
	return ok, failed
}

// signal hands a group's events to its aggregate's workflow: a one-shot
// start for an aggregate not dispatched recently (falling back to
// Signal-With-Start when a run is open after all), Signal-With-Start
// otherwise. Either way the workflow orders the events and drops repeats.
func (p *Poller) signal(ctx context.Context, g *aggregateGroup) (err error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.SignalTimeout)
	defer cancel()
	id := workflows.WorkflowID(g.aggType, g.aggID)
	ctx, span := p.dispatchSpan(ctx, g, id)
	defer func() { endSpan(span, err) }()
	// The run's settings are its worker's (workflows.Revision2).
	in := workflows.AggregateInput{
		AggregateType: g.aggType,
		AggregateID:   g.aggID,
		Revision:      workflows.CurrentRevision,
	}
	parts := chunks(g.events, maxRefsPerDispatch)
	how := DispatchSignal
	if p.cfg.StartMode == StartOneShot && !p.recent.seen(id, time.Now()) {
		started, err := p.startOneShot(ctx, id, parts[0], in)
		if err != nil {
			return err
		}
		if started {
			parts = parts[1:]
			how = DispatchStart
		} else {
			how = DispatchStartFallback
		}
	}
	// The rest (all of it, unless a one-shot run started) by signal, in
	// version order: the run started above, or an open one, takes them.
	for _, part := range parts {
		_, err = p.cfg.Temporal.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal,
			workflows.EventsSignalArg{Events: part},
			client.StartWorkflowOptions{ID: id, TaskQueue: p.cfg.TaskQueue},
			workflows.AggregateWorkflowName, in)
		if err != nil {
			return fmt.Errorf("signal-with-start %s: %w", id, err)
		}
	}
	p.metrics.Dispatched(how)
	return nil
}

// maxRefsPerDispatch bounds the event references in one start's input or
// one signal: about 100 bytes each, so a dispatch stays far below
// Temporal's 2 MB payload limit whatever the claim size (up to 5 ×
// BatchSize rows of one aggregate).
const maxRefsPerDispatch = 1000

// chunks splits events, in order, into slices of at most n.
func chunks(events []workflows.EventRef, n int) [][]workflows.EventRef {
	out := make([][]workflows.EventRef, 0, (len(events)+n-1)/n)
	for len(events) > n {
		out = append(out, events[:n])
		events = events[n:]
	}
	return append(out, events)
}

// startOneShot starts a one-shot run with the group's events in its input.
// It reports false, without an error, when a run of the aggregate is open:
// the caller signals that one instead. Eager: when a worker of the task
// queue shares the client (as in `ferry run`), the server hands it the
// first workflow task in the start's reply, skipping the task queue and a
// state transition; otherwise the start is an ordinary one.
func (p *Poller) startOneShot(ctx context.Context, id string, events []workflows.EventRef, in workflows.AggregateInput) (bool, error) {
	in.OneShot = true
	in.Pending = events
	_, err := p.cfg.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:               id,
		TaskQueue:        p.cfg.TaskQueue,
		EnableEagerStart: true,
		// The default would hand back the open run as if started.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, workflows.AggregateWorkflowName, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &already):
		return false, nil
	default:
		return false, fmt.Errorf("start %s: %w", id, err)
	}
}

// listen keeps a dedicated LISTEN connection and turns notifications into
// wake-ups. After every (re)connect it wakes the loop once, covering rows
// committed while it was not listening.
func (p *Poller) listen(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := p.listenOnce(ctx, func() { failures = 0 })
		if ctx.Err() != nil {
			return
		}
		failures++
		wait := backoff.Exponential(retryBase, p.cfg.MaxBackoff, failures)
		p.log.Warn("LISTEN connection lost; polling every PollInterval until it is back",
			"error", err, "poll_interval", p.cfg.PollInterval, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (p *Poller) listenOnce(ctx context.Context, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, p.cfg.Pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	connected()
	p.poke()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		p.poke()
	}
}

func (p *Poller) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// retryBase is the first wait of the loop's and the listener's backoff
// after a failure; it doubles up to MaxBackoff.
const retryBase = 500 * time.Millisecond
