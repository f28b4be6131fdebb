package poller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/internal/backoff"
	"github.com/ferry-outbox/ferry/internal/failpoint"
	"github.com/ferry-outbox/ferry/internal/pgtext"
	"github.com/ferry-outbox/ferry/internal/publishjournal"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/workflows"
)

// The publish-first lane (Config.Lane = LanePublishFirst): the relay
// publishes an aggregate's next events to the broker itself and marks
// them, as long as no workflow owns the aggregate, the events need no
// workflow and every publish succeeds. The first failure of the
// aggregate's own publish (unroutable, nacked, too large, refused), or an
// event that needs the workflow, hands the aggregate to its workflow
// ferry/<type>/<id>, with the events from that point on; the workflow
// owns it until its run releases it. A broker-wide failure (the broker
// unreachable, the connection or channel gone, no confirm in time) hands
// nothing over: the lane pauses with a backoff and the rows wait.
//
// Every step names the ownership epoch it was made under (lane_sql.go):
// the claim takes ownership in the statement that leases the rows, the
// mark gives it up (or hands it over) in the statement that marks them.

// Lanes (Config.Lane).
const (
	// LaneWorkflow hands every event to its aggregate's workflow: the
	// shape Ferry was designed around, and the default.
	LaneWorkflow = "workflow"
	// LanePublishFirst publishes directly and uses the workflow only for
	// the aggregates that need it.
	LanePublishFirst = "publish-first"
)

// Handoff causes that are not a failed publish's error class.
const (
	// CauseNeedsWorkflow: the event starts effects or goes to workflow
	// destinations, which only the workflow does.
	CauseNeedsWorkflow = "NeedsWorkflow"
	// CauseEventMissing: the claimed row could not be read back.
	CauseEventMissing = "EventMissing"
	// CauseRelayCrashed: relays lost the aggregate maxTakeovers times in a
	// row (their leases ran out while they held it).
	CauseRelayCrashed = "RelayCrashed"
)

// maxTakeovers is how often relays may take an aggregate over from a relay
// whose lease ran out, in a row, before it goes to its workflow.
const maxTakeovers = 3

// Error classes of the lane's direct publishes: the broker's answer about
// one message, which hands its aggregate to the workflow. They are the
// classes the workflow's publish activity reports for the same answers.
const (
	ClassUnroutable = "Unroutable"
	ClassNacked     = "Nacked"
	ClassTooLarge   = "PayloadTooLarge"
	ClassRefused    = "MessageRefused"
	// ClassBroker is a broker-wide failure: the lane pauses, nothing is
	// handed over.
	ClassBroker = "BrokerUnavailable"
)

// brokerCloseWait bounds closing the broker connection after a confirm
// that did not come in time (broker.Publisher does it: broker.CloseWait),
// so that nothing sent on it can still reach a queue once the relay gives
// up ownership.
const brokerCloseWait = broker.CloseWait

// LaneHeartbeat is the AMQP heartbeat of the publish-first lane's
// publisher for a lease: a tenth of it, at least 1s and at most broker's
// default 10s. A broker that stops answering (it did not even answer the
// close) drops the silent connection, with what it still held unrouted,
// within about three heartbeats; the lane's publishes end early enough
// that this happens within the lease (publishBudget).
func LaneHeartbeat(lease time.Duration) time.Duration {
	return min(max(lease/10, time.Second), broker.DefaultHeartbeat)
}

// publishBudget is how long after the claim a direct publish may wait for
// confirms: the mark (MarkTimeout) after the connection's close
// (brokerCloseWait) must fit in the lease; and when the close is not
// answered the relay keeps the aggregate until the lease ends, which must
// come after the broker dropped the connection (3.5 heartbeats).
func (p *Poller) publishBudget() time.Duration {
	hb := LaneHeartbeat(p.cfg.Lease)
	return min(p.cfg.Lease-p.cfg.MarkTimeout-brokerCloseWait, p.cfg.Lease-hb*7/2)
}

// maxDirectRun is the most contiguous versions of one aggregate a direct
// claim takes.
const maxDirectRun = 500

// maxDirectRows bounds the rows of one direct claim, and so the payloads
// one round holds in memory: as many as the workflow lane's claim takes
// (BatchSize oldest rows and claimExtension times as many more).
func (p *Poller) maxDirectRows() int { return (1 + claimExtension) * p.cfg.BatchSize }

// publishConcurrency is how many aggregates' publishes are in flight at
// once: each waits for its own confirms on the shared channel.
const publishConcurrency = 256

// classify says what a failed direct publish means: the aggregate's own
// failure (class, true), which hands it to the workflow, or a broker-wide
// one (ClassBroker, false).
func classify(err error) (string, bool) {
	switch {
	case errors.Is(err, delivery.ErrUnroutable):
		return ClassUnroutable, true
	case errors.Is(err, delivery.ErrNacked):
		return ClassNacked, true
	case errors.Is(err, delivery.ErrTooLarge):
		return ClassTooLarge, true
	case errors.Is(err, delivery.ErrRefused):
		return ClassRefused, true
	default:
		return ClassBroker, false
	}
}

// laneEvent is one row of a direct claim.
type laneEvent struct {
	claimed
	row relaydb.PublishRow
}

// laneAggregate is one aggregate of a direct claim, and what became of it.
type laneAggregate struct {
	aggType, aggID string
	epoch          int64
	// takeovers: how often in a row a relay took the aggregate over from a
	// relay whose lease ran out.
	takeovers int
	events    []laneEvent // versions ascending, contiguous from delivered + 1
	// cut: events[cut:] go to the workflow untried (NeedsWorkflow,
	// EventMissing: cause says which).
	cut   int
	cause string
	// confirmed leading events are published; err says why the next was
	// not (nil: all up to cut were).
	confirmed int
	err       error
	// class of err; down: a broker-wide failure.
	class string
	down  bool
}

// handoff says whether the aggregate goes to its workflow, and from which
// event on.
func (a *laneAggregate) handoff() (bool, int) {
	switch {
	case a.down:
		return false, 0
	case a.err != nil:
		return true, a.confirmed
	case a.cut < len(a.events):
		return true, a.cut
	}
	return false, 0
}

// lanePause is the lane's wait after a broker-wide failure.
type lanePause struct {
	mu       sync.Mutex
	until    time.Time
	failures int
}

func (l *lanePause) paused(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.until)
}

// fail extends the pause and returns how long it is.
func (l *lanePause) fail(base, ceiling time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures++
	wait := backoff.Exponential(base, ceiling, l.failures)
	l.until = time.Now().Add(wait)
	return wait
}

// ok ends the pause; it reports whether there was one.
func (l *lanePause) ok() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := l.failures > 0
	l.failures, l.until = 0, time.Time{}
	return was
}

// laneRound is one round of the publish-first lane: the direct claim
// (unless a broker-wide failure paused it), then the claim of the
// aggregates workflows own. only limits both to some aggregates (the
// log-tailing relay's stream); nil takes the oldest. again says that
// another round would find more (a claim came back full, or a released
// aggregate has later versions).
func (p *Poller) laneRound(ctx context.Context, only []relaydb.AggregateKey) (n int, again bool, err error) {
	if n, again, err = p.directRound(ctx, only); err != nil {
		return n, false, err
	}
	m, err := p.dispatchOwned(ctx, only)
	return n + m, again || m >= p.cfg.BatchSize, err
}

// directRound is laneRound's direct half: what the loop and the stream
// run, while ServeOwned runs the other half on its own.
func (p *Poller) directRound(ctx context.Context, only []relaydb.AggregateKey) (int, bool, error) {
	if p.pause.paused(time.Now()) {
		return 0, false, nil
	}
	return p.publishDirect(ctx, only)
}

// ServeOwned runs, until ctx ends, the publish-first lane's workflow side:
// the claim of the aggregates workflows own, which starts the runs of
// aggregates just handed over and signals the runs of the others, on its
// own loop, so that a Temporal that is slow or away holds up only the
// aggregates that need it, never the direct publishes. It drains whenever
// a direct round handed something over or new rows were notified, and
// every PollInterval. Start runs it; a relay that drives the poller
// without Start (package walrelay) runs it itself. In the workflow lane it
// returns at once.
func (p *Poller) ServeOwned(ctx context.Context) {
	if p.cfg.Lane != LanePublishFirst {
		return
	}
	ticker := time.NewTicker(p.cfg.PollInterval)
	defer ticker.Stop()
	failures := 0
	for {
		for {
			n, err := p.dispatchOwned(ctx, nil)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failures++
				wait := backoff.Exponential(retryBase, p.cfg.MaxBackoff, failures)
				p.log.Warn("claim of aggregates workflows own failed; retried", "error", err, "retry_in", wait)
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				continue
			}
			failures = 0
			if n < p.cfg.BatchSize {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.ownedWake:
		case <-ticker.C:
		}
	}
}

func (p *Poller) pokeOwned() {
	select {
	case p.ownedWake <- struct{}{}:
	default:
	}
}

// publishDirect claims, publishes and marks one batch of the lane.
func (p *Poller) publishDirect(ctx context.Context, only []relaydb.AggregateKey) (int, bool, error) {
	start := time.Now()
	busy, full, err := p.claimBatch(ctx, only)
	if err != nil || len(busy) == 0 {
		return 0, full, err
	}
	n, more, err := p.finishDirect(ctx, start, busy)
	return n, more || full, err
}

// directRounds is how many direct batches the claim pass has out at once:
// the next claim is made while the batch before it waits for the broker's
// confirms and its mark. A batch's time is mostly waiting (a confirm
// waits for the broker's disk, a mark for PostgreSQL's commit), so one
// relay that overlaps two keeps both busy: in one process on 2 cores, a
// backlog of 10,000 aggregates × 10 events drained at about 6,600
// events/s with two out, 5,300 with one. Batches in flight never share
// an aggregate: each claim skips the aggregates under a live lease, as it
// skips another relay's, and the claims are made one after the other.
const directRounds = 2

// drainDirect is the claim pass of the publish-first lane: direct
// batches, up to directRounds at once, claimed one after the other until
// a claim comes back short and, once the batches in flight are settled,
// again while a released aggregate has later versions. It returns the
// rows claimed and the first error, which ends the pass.
func (p *Poller) drainDirect(ctx context.Context) (int, error) {
	var (
		mu    sync.Mutex
		total int
		more  bool
		first error
	)
	for {
		var wg sync.WaitGroup
		slots := make(chan struct{}, directRounds)
		for {
			slots <- struct{}{} // blocks while directRounds batches are out
			mu.Lock()
			failed := first != nil
			mu.Unlock()
			if failed || ctx.Err() != nil || p.pause.paused(time.Now()) {
				break
			}
			start := time.Now()
			busy, full, err := p.claimBatch(ctx, nil)
			if err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
				break
			}
			if len(busy) > 0 {
				wg.Go(func() {
					defer func() { <-slots }()
					n, m, err := p.finishDirect(ctx, start, busy)
					mu.Lock()
					defer mu.Unlock()
					total += n
					more = more || m
					first = cmpErr(first, err)
				})
			} else {
				<-slots
			}
			if !full {
				break
			}
		}
		wg.Wait()
		if first != nil || !more || ctx.Err() != nil {
			return total, first
		}
		more = false
	}
}

// markCtx is the context of a statement that settles what a batch
// claimed. Detached: what was claimed must be settled even when Stop
// cancels ctx, or it waits out its lease. Each settling statement gets
// its MarkTimeout from when it starts, not from the claim: publishes end
// by claim + Lease - MarkTimeout - brokerCloseWait, so a mark that starts
// after them still ends within the lease, while a deadline counted from
// the claim would have run out during a publish longer than MarkTimeout
// and left everything it confirmed unmarked (published again after the
// lease).
func (p *Poller) markCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), p.cfg.MarkTimeout)
}

// claimBatch runs the direct claim and gives up at once the aggregates it
// took no row of, so that the next claim can take them; it returns the
// others, and full when the claim took all the aggregates it could (more
// are probably waiting).
func (p *Poller) claimBatch(ctx context.Context, only []relaydb.AggregateKey) (busy []*laneAggregate, full bool, err error) {
	aggs, err := p.claimDirect(ctx, only)
	if err != nil || len(aggs) == 0 {
		return nil, false, err
	}
	var empty []*laneAggregate
	for _, a := range aggs {
		if len(a.events) == 0 {
			empty = append(empty, a)
		} else {
			busy = append(busy, a)
		}
	}
	if len(empty) > 0 {
		mctx, cancel := p.markCtx(ctx)
		p.releaseEmpty(mctx, empty)
		cancel()
	}
	return busy, len(aggs) >= p.cfg.BatchSize, nil
}

// finishDirect publishes and marks the aggregates (each with rows) that
// a claim made at start took. more says a released aggregate has later
// versions.
func (p *Poller) finishDirect(ctx context.Context, start time.Time, busy []*laneAggregate) (int, bool, error) {
	rows := 0
	for _, a := range busy {
		rows += len(a.events)
	}
	failpoint.Inject("lane.after-claim")
	if err := p.loadRows(ctx, busy); err != nil {
		mctx, cancel := p.markCtx(ctx)
		defer cancel()
		p.settle(mctx, busy, err)
		return rows, false, err
	}
	p.publish(ctx, start, busy)
	failpoint.Inject("lane.after-confirm")
	mctx, cancel := p.markCtx(ctx)
	defer cancel()
	more, err := p.settle(mctx, busy, nil)
	p.metrics.Batch(rows, 0, time.Since(start))
	return rows, more, err
}

// claimDirect runs the direct claim and groups its rows per aggregate.
func (p *Poller) claimDirect(ctx context.Context, only []relaydb.AggregateKey) ([]*laneAggregate, error) {
	var rs pgx.Rows
	var err error
	if only == nil {
		rs, err = p.cfg.Pool.Query(ctx, sqlLaneClaim, p.cfg.BatchSize, p.cfg.Lease, p.cfg.Name, maxDirectRun, p.maxDirectRows())
	} else {
		types, ids := splitKeys(only)
		rs, err = p.cfg.Pool.Query(ctx, sqlLaneClaimOf, len(only), p.cfg.Lease, p.cfg.Name, maxDirectRun, p.maxDirectRows(), types, ids)
	}
	if err != nil {
		return nil, fmt.Errorf("claim outbox batch: %w", err)
	}
	byKey := map[relaydb.AggregateKey]*laneAggregate{}
	var out []*laneAggregate
	var (
		k         relaydb.AggregateKey
		epoch     int64
		takeovers int
		c         claimed
	)
	_, err = pgx.ForEachRow(rs, []any{&k.Type, &k.ID, &epoch, &takeovers, &c.id, &c.version, &c.eventType, &c.traceParent, &c.traceState, &c.attempts}, func() error {
		// A line is an owned aggregate (its epoch) or a claimed row (its
		// aggregate's, in any order).
		a := byKey[k]
		if a == nil {
			a = &laneAggregate{aggType: k.Type, aggID: k.ID}
			byKey[k] = a
			out = append(out, a)
		}
		if epoch > 0 {
			a.epoch, a.takeovers = epoch, takeovers
		}
		if c.id != "" {
			c.aggType, c.aggID = k.Type, k.ID
			a.events = append(a.events, laneEvent{claimed: c})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim outbox batch: %w", err)
	}
	for _, a := range out {
		slices.SortFunc(a.events, func(x, y laneEvent) int { return int(x.version - y.version) })
		a.cut = len(a.events)
		if a.takeovers >= maxTakeovers {
			// Relays died (or stalled) holding this aggregate again and
			// again: perhaps its event kills them. Its workflow tries it,
			// with attempts Temporal counts and the UI shows.
			a.cut, a.cause = 0, CauseRelayCrashed
		}
	}
	return out, nil
}

func splitKeys(keys []relaydb.AggregateKey) (types, ids []string) {
	types, ids = make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		types[i], ids[i] = k.Type, k.ID
	}
	return types, ids
}

// releaseEmpty gives up the owner rows of aggregates whose run came back
// empty, so their rows do not wait out a lease.
func (p *Poller) releaseEmpty(ctx context.Context, aggs []*laneAggregate) {
	types, ids, epochs := make([]string, len(aggs)), make([]string, len(aggs)), make([]int64, len(aggs))
	for i, a := range aggs {
		types[i], ids[i], epochs[i] = a.aggType, a.aggID, a.epoch
	}
	if _, err := p.cfg.Pool.Exec(ctx, sqlReleaseOwners, types, ids, epochs); err != nil {
		p.log.Warn("could not release aggregates whose next version was out of reach; they return after the lease", "aggregates", len(aggs), "error", err)
	}
}

// loadRows reads the payloads of the claimed rows and cuts each aggregate
// before the first event that needs its workflow (or whose row is gone).
func (p *Poller) loadRows(ctx context.Context, aggs []*laneAggregate) error {
	var ids []string
	for _, a := range aggs {
		for _, e := range a.events {
			ids = append(ids, e.id)
		}
	}
	rows, err := relaydb.LoadManyForPublish(ctx, p.cfg.Pool, ids)
	if err != nil {
		return fmt.Errorf("load %d claimed rows: %w", len(ids), err)
	}
	for _, a := range aggs {
		for i := range a.events {
			e := &a.events[i]
			row, ok := rows[e.id]
			switch {
			case !ok:
				a.cut, a.cause = i, CauseEventMissing
			case p.cfg.NeedsWorkflow != nil && p.cfg.NeedsWorkflow(a.aggType, e.eventType):
				a.cut, a.cause = i, CauseNeedsWorkflow
			}
			if a.cut == i {
				break
			}
			e.row = row
		}
	}
	return nil
}

// publish sends every aggregate's events up to its cut, many aggregates
// at once, each in version order, and records what the broker confirmed.
// Publishes end before the lease can run out (publishBudget).
func (p *Poller) publish(ctx context.Context, claimedAt time.Time, aggs []*laneAggregate) {
	ctx, cancel := context.WithDeadline(ctx, claimedAt.Add(p.publishBudget()))
	defer cancel()
	sem := make(chan struct{}, publishConcurrency)
	var wg sync.WaitGroup
	for _, a := range aggs {
		if a.cut == 0 {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			events := make([]delivery.Event, a.cut)
			for i, e := range a.events[:a.cut] {
				events[i] = delivery.Event{ID: e.id, Row: e.row}
			}
			defer publishjournal.Relay(ctx, p.cfg.Pool, p.cfg.Name, a.aggType, a.aggID, a.events[0].version, a.events[a.cut-1].version, a.epoch, claimedAt.Add(p.cfg.Lease)).End(&a.err)
			a.confirmed, a.err = p.cfg.Target.Publish(ctx, events)
			if a.err != nil {
				var own bool
				a.class, own = classify(a.err)
				a.down = !own
			}
		})
	}
	wg.Wait()
}

// settle marks what the broker confirmed and gives each aggregate up or
// hands it to its workflow, in one statement for the aggregates whose
// counter row is free and in one each for the others (waiting for the
// producer that holds it). cause, when set, is a failure before anything
// was published: every aggregate is given up with its rows backed off.
// more says a released aggregate has later versions.
func (p *Poller) settle(ctx context.Context, aggs []*laneAggregate, cause error) (bool, error) {
	var down []*laneAggregate
	for _, a := range aggs {
		if cause != nil {
			a.confirmed, a.err, a.class, a.down = 0, cause, ClassBroker, true
		}
		if a.down {
			down = append(down, a)
		}
	}
	var pause time.Duration
	var firstDown error
	if len(down) > 0 {
		pause = p.pause.fail(retryBase, p.cfg.MaxBackoff)
		firstDown = down[0].err
		p.log.Warn("the broker failed; the publish-first lane pauses, its rows wait and nothing is handed to workflows (a broker-wide failure, not the aggregates')",
			"aggregates", len(down), "error", firstDown, "retry_in", pause)
	} else if cause == nil && p.pause.ok() {
		p.log.Info("the broker answers again; the publish-first lane resumes")
	}
	if unsettled := slices.ContainsFunc(down, func(a *laneAggregate) bool { return errors.Is(a.err, broker.ErrUnsettled) }); unsettled {
		// The broker answered neither the confirms nor the close: what
		// the connection held may still be routed until the broker drops
		// it (heartbeats). These aggregates stay this relay's until their
		// lease ends, unmarked, so that no other relay publishes them
		// before then (their confirmed rows go out again: duplicates).
		p.log.Warn("the broker answered neither the confirms nor the connection's close: keeping those aggregates until their lease ends, so that nothing the connection held reaches a queue after another relay took them over",
			"aggregates", len(down), "lease", p.cfg.Lease)
		aggs = slices.DeleteFunc(slices.Clone(aggs), func(a *laneAggregate) bool { return a.down })
		if len(aggs) == 0 {
			return false, nil
		}
		pause, firstDown = 0, nil
	}

	results, err := p.mark(ctx, sqlLaneMark, aggs, pause, firstDown)
	if err != nil {
		return false, fmt.Errorf("mark a direct batch: %w", err)
	}
	var locked []*laneAggregate
	for _, a := range aggs {
		if results[a].status == markLocked {
			locked = append(locked, a)
		}
	}
	if len(locked) > 0 {
		// One statement each, waiting for the producer that holds the
		// counter row: with one row locked per statement no deadlock is
		// possible.
		var mu sync.Mutex
		var wg sync.WaitGroup
		var firstErr error
		for _, a := range locked {
			wg.Go(func() {
				r, err := p.mark(ctx, sqlLaneMarkWait, []*laneAggregate{a}, pause, firstDown)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					firstErr = cmpErr(firstErr, err)
					return
				}
				results[a] = r[a]
			})
		}
		wg.Wait()
		if firstErr != nil {
			p.log.Warn("could not mark some aggregates of a direct batch; their rows return after the lease and are published again", "error", firstErr)
		}
	}

	more, handed := false, false
	for _, a := range aggs {
		r := results[a]
		switch r.status {
		case markOK:
		case markFenced:
			p.log.Warn("lost an aggregate while publishing it (its lease ran out and another owner took it): nothing of it was marked, and what was confirmed may arrive twice",
				"aggregate", workflows.WorkflowID(a.aggType, a.aggID), "epoch", a.epoch, "confirmed", a.confirmed)
			continue
		default:
			continue // not marked: the rows return after the lease
		}
		p.countDirect(a)
		more = more || r.more
		handed = handed || r.newEpoch > 0
	}
	if handed {
		// The handed rows are due now, owned by their workflows: the
		// workflow side (ServeOwned) starts the runs, so that a Temporal
		// that is slow or away never holds up the direct claims.
		p.pokeOwned()
	}
	return more, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// markResult is one aggregate's line of sqlLaneMark.
type markResult struct {
	status   string
	newEpoch int64
	more     bool
}

// mark runs one of the lane's mark statements over aggs.
func (p *Poller) mark(ctx context.Context, sql string, aggs []*laneAggregate, pause time.Duration, downErr error) (map[*laneAggregate]markResult, error) {
	n := len(aggs)
	types, ids, epochs, upto, lo := make([]string, n), make([]string, n), make([]int64, n), make([]int64, n), make([]int64, n)
	handoff, causes, handed := make([]bool, n), make([]string, n), make([]int64, n)
	var backoffIDs, handedIDs []string
	byKey := make(map[relaydb.AggregateKey]*laneAggregate, n)
	for i, a := range aggs {
		types[i], ids[i], epochs[i] = a.aggType, a.aggID, a.epoch
		byKey[relaydb.AggregateKey{Type: a.aggType, ID: a.aggID}] = a
		if a.confirmed > 0 {
			// Contiguous versions (the claim's run): the statement marks
			// the range.
			lo[i], upto[i] = a.events[0].version, a.events[a.confirmed-1].version
		}
		if h, from := a.handoff(); h {
			handoff[i] = true
			handed[i] = a.events[len(a.events)-1].version
			causes[i] = a.cause
			if a.err != nil {
				causes[i] = a.class
			}
			for _, e := range a.events[from:] {
				handedIDs = append(handedIDs, e.id)
			}
		}
		if a.down {
			for _, e := range a.events[a.confirmed:] {
				backoffIDs = append(backoffIDs, e.id)
			}
		}
	}
	msg := ""
	if downErr != nil {
		msg = pgtext.Truncate("the publish-first lane paused after a broker-wide failure: "+downErr.Error(), 1000)
	}
	rs, err := p.cfg.Pool.Query(ctx, sql, types, ids, epochs, upto, handoff, causes, handed, lo, pause, msg, backoffIDs, handedIDs, p.cfg.Name)
	if err != nil {
		return nil, err
	}
	out := make(map[*laneAggregate]markResult, n)
	var (
		k           relaydb.AggregateKey
		r           markResult
		marked, bck int64
	)
	_, err = pgx.ForEachRow(rs, []any{&k.Type, &k.ID, &r.status, &r.newEpoch, &r.more, &marked, &bck}, func() error {
		if a := byKey[k]; a != nil {
			out[a] = r
		}
		return nil
	})
	return out, err
}

// countDirect counts an aggregate's direct publishes and its handoff.
func (p *Poller) countDirect(a *laneAggregate) {
	for _, e := range a.events[:a.confirmed] {
		p.metrics.Published(a.aggType, e.row.DueAt)
	}
	if a.confirmed > 0 {
		p.metrics.LanePublished(metrics.PathDirect, a.confirmed)
	}
	if a.err != nil {
		p.metrics.PublishFailed(a.class)
	}
	if h, _ := a.handoff(); h {
		cause := a.cause
		if a.err != nil {
			cause = a.class
		}
		p.metrics.Handoff(metrics.ToWorkflow, cause)
		p.log.Info("handing the aggregate to its workflow", "aggregate", workflows.WorkflowID(a.aggType, a.aggID),
			"cause", cause, "published_directly", a.confirmed, "handed", len(a.events)-a.confirmed, "error", a.err)
	}
}

// dispatchOwned hands the pending rows of aggregates that workflows own
// to their runs, by signal under the owner's epoch.
func (p *Poller) dispatchOwned(ctx context.Context, only []relaydb.AggregateKey) (int, error) {
	start := time.Now()
	var rs pgx.Rows
	var err error
	if only == nil {
		rs, err = p.cfg.Pool.Query(ctx, sqlOwnedClaim, p.cfg.BatchSize, p.cfg.Lease, p.cfg.Name)
	} else {
		types, ids := splitKeys(only)
		rs, err = p.cfg.Pool.Query(ctx, sqlOwnedClaimOf, p.cfg.BatchSize, p.cfg.Lease, p.cfg.Name, types, ids)
	}
	if err != nil {
		return 0, fmt.Errorf("claim rows of aggregates workflows own: %w", err)
	}
	type owner struct {
		epoch int64
		first bool
		cause string
	}
	owners := map[relaydb.AggregateKey]owner{}
	batch, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (claimed, error) {
		var c claimed
		var o owner
		err := r.Scan(&c.id, &c.aggType, &c.aggID, &c.version, &c.eventType, &c.traceParent, &c.traceState, &c.attempts, &o.epoch, &o.first, &o.cause)
		owners[relaydb.AggregateKey{Type: c.aggType, ID: c.aggID}] = o
		return c, err
	})
	if err != nil {
		return 0, fmt.Errorf("claim rows of aggregates workflows own: %w", err)
	}
	if len(batch) == 0 {
		return 0, nil
	}
	groups := group(batch)
	for _, g := range groups {
		o := owners[relaydb.AggregateKey{Type: g.aggType, ID: g.aggID}]
		// The first hand-over since the relay handed the aggregate over:
		// a run of its own, the events in its input, the regular path
		// first (the handoff's failure is the reason).
		g.epoch, g.handoff, g.cause = o.epoch, o.first, o.cause
	}
	dctx, dcancel := context.WithTimeout(ctx, p.cfg.Lease-p.cfg.MarkTimeout)
	ok, failed := p.dispatch(dctx, groups)
	dcancel()
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.MarkTimeout)
	defer cancel()
	if err := p.settleDispatch(mctx, groups, ok, failed); err != nil {
		return len(batch), err
	}
	if len(failed) > 0 {
		p.log.Warn("could not hand some aggregates' events to their workflows; their rows stay pending and are retried with a backoff",
			"failed_aggregates", len(failed), "of", len(groups), "first_aggregate", failed[0].workflowID, "first_error", failed[0].err)
	}
	p.metrics.Batch(len(batch), len(failed), time.Since(start))
	return len(batch), nil
}

// settleDispatch marks the rows Temporal took dispatched (under their
// group's epoch, when the group has one) and gives the failed groups'
// rows back with a backoff, quarantining those Temporal refused as invalid
// too often. It returns the mark's error.
func (p *Poller) settleDispatch(ctx context.Context, groups []*aggregateGroup, ok []string, failed []failure) error {
	var markErr error
	if len(ok) > 0 {
		if err := p.markDispatched(ctx, groups, ok); err != nil {
			// The workflows have the events; the rows come back after the
			// lease and are handed over again, and the workflows drop them.
			markErr = fmt.Errorf("mark %d rows dispatched: %w", len(ok), err)
		}
	}
	for _, f := range failed {
		release, class := f.ids, ""
		if refused(f.err) {
			release, class = p.quarantineRefused(ctx, f), ErrClassTemporalRefused
		}
		if len(release) == 0 {
			continue
		}
		if _, err := p.cfg.Pool.Exec(ctx, sqlRelease, release, p.cfg.MaxBackoff, pgtext.Truncate(f.err.Error(), 1000), class); err != nil {
			p.log.Warn("could not release rows; they return after the lease", "aggregate", f.workflowID, "error", err)
		}
	}
	return markErr
}

// markDispatched marks the accepted rows: unfenced for groups without an
// epoch (the workflow lane), under their epoch for the others.
func (p *Poller) markDispatched(ctx context.Context, groups []*aggregateGroup, ok []string) error {
	accepted := make(map[string]bool, len(ok))
	for _, id := range ok {
		accepted[id] = true
	}
	var plain, owned []string
	var epochs []int64
	for _, g := range groups {
		for _, id := range g.ids {
			switch {
			case !accepted[id]:
			case g.epoch == 0:
				plain = append(plain, id)
			default:
				owned = append(owned, id)
				epochs = append(epochs, g.epoch)
			}
		}
	}
	if len(plain) > 0 {
		if _, err := p.cfg.Pool.Exec(ctx, sqlMarkDispatched, plain); err != nil {
			return err
		}
	}
	if len(owned) > 0 {
		if _, err := p.cfg.Pool.Exec(ctx, sqlMarkDispatchedOwned, owned, epochs); err != nil {
			return err
		}
	}
	return nil
}
