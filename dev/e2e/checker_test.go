package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/internal/publishjournal"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/workflows"
)

// The fault suite's checker, in the manner of Jepsen's queue checker: a
// workload of producer transactions (most committed, some rolled back on
// purpose, some cut off before COMMIT as a crashing producer would be) runs
// while Ferry runs as separate processes and faults are injected; then the
// checker drains and accounts for every event at each layer:
//
//   - producer: attempted, committed, rolled back, crashed before commit, and
//     commits whose outcome was unknown (resolved from the table afterwards);
//   - relay: how often Temporal recorded a signal carrying each event id
//     (from the aggregate workflows' histories);
//   - transport: a tap queue bound to every routing key of the test's
//     exchange, read by the test process itself (it never crashes): unique
//     deliveries, lost (committed, never delivered), unexpected (delivered,
//     never committed), duplicated copies, per-aggregate order violations;
//   - consumer: checker consumer processes (package consumer and inbox, the
//     way a service consumes Ferry's events) write one effect row per event in
//     the inbox transaction; effects per idempotency key (event id), effect
//     order per aggregate, and the redeliveries the inbox absorbed;
//   - store: orphaned rows (a business row without its event or the reverse)
//     and atomicity (a row stored for an aborted transaction).
//
//   - publishers (the publish-first lane): the publish journal
//     (internal/publishjournal) records every publish made under an owner
//     epoch, relay's or run's, from its send to its confirm; no two owners'
//     publishes of one aggregate may overlap in time, and every row marked
//     published under an epoch must have its publish in the journal.
//
// It fails the test unless lost, unexpected, order violations, late copies
// (unless the run's faults make them: see lateCopies), overlapping owners,
// orphans and atomicity violations are zero and every committed event has
// exactly one effect. Duplicates are reported, not failed: they are
// allowed at the transport layers and absorbed by the inbox.
//
// A late copy is a copy of a version that arrives after the first copy of
// a later version of its aggregate. The order check reads first copies
// only, so two publishers of one aggregate at once pass it; their copies
// interleave, and the late copies show it. A late copy is also what a
// legitimate repeat of a run of versions looks like: a publisher that sent
// v5..v7 and never marked them (killed after the confirm, its mark lost to
// a database failure, its confirms lost with the broker's connection) has
// them sent again, from v5, after v7's first copy. So runs with kills or
// such faults report late copies; the others must have none.

// outcome is what became of one producer transaction.
type outcome int

const (
	committed     outcome = iota + 1
	rolledBack            // rolled back on purpose
	crashed               // the producer's connection died before COMMIT
	failed                // an error before COMMIT: aborted
	indeterminate         // COMMIT failed or was cut off: it may have happened
)

// attempt is one producer transaction: one business row and one event.
type attempt struct {
	aggID   string
	outcome outcome
}

// observation is one event as a layer saw it.
type observation struct {
	id, aggID string
	version   int64
}

// publishRecord is one publish in the journal (publishjournal.Record): an
// aggregate's versions first..last sent under epoch by party, from start
// to end. end is when the publish returned or, when it never did (its
// publisher was killed), the latest end the lane allows it.
type publishRecord struct {
	aggID       string
	first, last int64
	epoch       int64
	party       string
	start, end  time.Time
	ended       bool // end is the publish's own; false: its bound
	outcome     string
}

// epochMark is a row marked published under an owner epoch.
type epochMark struct {
	aggID          string
	version, epoch int64
}

// history is what the checker gathered after the drain.
type history struct {
	attempts map[string]attempt // by event id
	stored   map[string]bool    // event ids in outbox_events
	tap      []observation      // every copy on the tap queue, in arrival order
	signals  map[string]int     // event id → times handed to a run (signals, one-shot starts); nil: not counted
	effects  []observation      // the consumer's effect rows, in commit order
	absorbed int                // deliveries the inbox dropped (duplicate or stale)
	orphans  int                // business rows without an event, or the reverse
	// late says why this run may have late copies (its faults repeat runs
	// of versions); "": it must have none.
	late string
	// journal is the publish journal, nil when the run kept none (the
	// workflow lane); marks are the rows published under an epoch.
	journal []publishRecord
	marks   []epochMark
	// overlapping says why this run may have overlapping owners (the
	// journal's negative control); "": it must have none.
	overlapping string
}

// report is the checker's accounting.
type report struct {
	Attempted, Committed, RolledBack, Crashed, Failed int
	Unknown, UnknownCommitted                         int

	// Event ids handed to runs (signals and one-shot starts), and how many
	// of those were repeats. -1: not counted.
	Signals, DuplicateSignals int

	Delivered, Lost, Unexpected    int
	DuplicateCopies, DuplicatedIDs int
	OrderViolations                int
	// LateCopies: copies of a version after a later version's first copy;
	// LateAllowed says why this run may have them ("": it may not).
	LateCopies  int
	LateAllowed string

	// The publish journal (-1: not kept): publishes recorded, those whose
	// publisher never said it was done, pairs of two owners' publishes of
	// one aggregate that overlap in time, and rows marked published under
	// an epoch whose publish is not in the journal. OverlapsAllowed says
	// why this run may have overlaps ("": it may not); overlaps lists them.
	Journaled, Unended, Overlaps, Unjournaled int
	OverlapsAllowed                           string
	overlaps                                  []overlap

	EffectsOnce, EffectsMissing, EffectsMultiple, EffectsUnexpected int
	EffectOrderViolations, Absorbed                                 int

	Orphans, Atomicity int

	Drained  time.Duration
	TimedOut bool
}

// account is the pure part of the checker: it judges a history.
func account(h history) report {
	var r report
	want := map[string]bool{} // committed, as far as the store says for the unknown ones
	for id, a := range h.attempts {
		r.Attempted++
		switch a.outcome {
		case committed:
			r.Committed++
			want[id] = true
			if !h.stored[id] {
				r.Atomicity++ // COMMIT succeeded, the row is not there
			}
		case rolledBack, crashed, failed:
			switch a.outcome {
			case rolledBack:
				r.RolledBack++
			case crashed:
				r.Crashed++
			default:
				r.Failed++
			}
			if h.stored[id] {
				r.Atomicity++ // aborted, yet stored
			}
		case indeterminate:
			r.Unknown++
			if h.stored[id] {
				r.UnknownCommitted++
				r.Committed++
				want[id] = true
			}
		}
	}

	r.Signals, r.DuplicateSignals = -1, -1
	if h.signals != nil {
		r.Signals, r.DuplicateSignals = 0, 0
		for _, n := range h.signals {
			r.Signals += n
			r.DuplicateSignals += max(n-1, 0)
		}
	}

	copies := map[string]int{}
	var firsts []observation
	for _, o := range h.tap {
		copies[o.id]++
		if copies[o.id] == 1 {
			firsts = append(firsts, o)
		}
	}
	for id, n := range copies {
		if !want[id] {
			r.Unexpected++
			continue
		}
		r.Delivered++
		if n > 1 {
			r.DuplicatedIDs++
			r.DuplicateCopies += n - 1
		}
	}
	for id := range want {
		if copies[id] == 0 {
			r.Lost++
		}
	}
	r.OrderViolations = orderViolations(firsts, want)
	r.LateCopies, r.LateAllowed = lateCopies(h.tap, want), h.late

	r.Journaled, r.Unended, r.Overlaps, r.Unjournaled = -1, -1, -1, -1
	if h.journal != nil {
		r.Journaled, r.Unended = len(h.journal), 0
		for _, p := range h.journal {
			if !p.ended {
				r.Unended++
			}
		}
		r.overlaps = overlaps(h.journal)
		r.Overlaps = len(r.overlaps)
		r.Unjournaled = unjournaled(h.marks, h.journal)
	}
	r.OverlapsAllowed = h.overlapping

	effects := map[string]int{}
	var firstEffects []observation
	for _, o := range h.effects {
		effects[o.id]++
		if effects[o.id] == 1 {
			firstEffects = append(firstEffects, o)
		}
	}
	for id, n := range effects {
		switch {
		case !want[id]:
			r.EffectsUnexpected++
		case n == 1:
			r.EffectsOnce++
		default:
			r.EffectsMultiple++
		}
	}
	for id := range want {
		if effects[id] == 0 {
			r.EffectsMissing++
		}
	}
	r.EffectOrderViolations = orderViolations(firstEffects, want)
	r.Absorbed = h.absorbed
	r.Orphans = h.orphans
	return r
}

// orderViolations counts, among the wanted observations, those whose version
// is not one more than the previous one of the same aggregate (starting at
// 1): both a version that comes early and one that comes late count.
func orderViolations(obs []observation, want map[string]bool) int {
	last := map[string]int64{}
	n := 0
	for _, o := range obs {
		if !want[o.id] {
			continue
		}
		if o.version != last[o.aggID]+1 {
			n++
		}
		last[o.aggID] = o.version
	}
	return n
}

// lateCopies counts the copies of wanted events that arrive after the
// first copy of a later version of their aggregate.
func lateCopies(tap []observation, want map[string]bool) int {
	top := map[string]int64{} // per aggregate, the highest version whose first copy came
	seen := map[string]bool{}
	n := 0
	for _, o := range tap {
		if !want[o.id] {
			continue
		}
		if o.version < top[o.aggID] {
			n++
		}
		if !seen[o.id] {
			seen[o.id] = true
			top[o.aggID] = max(top[o.aggID], o.version)
		}
	}
	return n
}

// overlap is two owners' publishes of one aggregate at once.
type overlap struct{ a, b publishRecord }

func (o overlap) String() string {
	rec := func(p publishRecord) string {
		end := "ended " + p.end.Format("15:04:05.000000")
		if !p.ended {
			end = "never ended; bound " + p.end.Format("15:04:05.000000")
		}
		return fmt.Sprintf("epoch %d (%s, v%d-%d, from %s, %s)", p.epoch, p.party, p.first, p.last, p.start.Format("15:04:05.000000"), end)
	}
	return fmt.Sprintf("%s: %s and %s", o.a.aggID, rec(o.a), rec(o.b))
}

// overlaps finds the pairs of publishes of one aggregate under different
// epochs whose times intersect: two owners publishing at once. Publishes
// of one epoch may overlap (a run's activity retried while the killed
// attempt's publish has no end: one owner).
func overlaps(journal []publishRecord) []overlap {
	byAgg := map[string][]publishRecord{}
	for _, p := range journal {
		byAgg[p.aggID] = append(byAgg[p.aggID], p)
	}
	aggs := make([]string, 0, len(byAgg))
	for a := range byAgg {
		aggs = append(aggs, a)
	}
	slices.Sort(aggs)
	var out []overlap
	for _, a := range aggs {
		ps := byAgg[a]
		slices.SortStableFunc(ps, func(x, y publishRecord) int { return x.start.Compare(y.start) })
		for i, p := range ps {
			for _, q := range ps[i+1:] {
				if !q.start.Before(p.end) {
					break // sorted by start: no later one begins before p ended
				}
				if q.epoch != p.epoch {
					out = append(out, overlap{p, q})
				}
			}
		}
	}
	return out
}

// unjournaled counts the rows marked published under an epoch that no
// journal row of that epoch covers: a publish the journal missed, which
// would make its silence about overlaps worthless.
func unjournaled(marks []epochMark, journal []publishRecord) int {
	type key struct {
		agg   string
		epoch int64
	}
	spans := map[key][][2]int64{}
	for _, p := range journal {
		k := key{p.aggID, p.epoch}
		spans[k] = append(spans[k], [2]int64{p.first, p.last})
	}
	n := 0
	for _, m := range marks {
		if !slices.ContainsFunc(spans[key{m.aggID, m.epoch}], func(s [2]int64) bool { return s[0] <= m.version && m.version <= s[1] }) {
			n++
		}
	}
	return n
}

// failures lists what breaks the delivery contract; empty means pass.
func (r report) failures() []string {
	var out []string
	check := func(n int, what string) {
		if n != 0 {
			out = append(out, fmt.Sprintf("%d %s", n, what))
		}
	}
	check(r.Lost, "lost")
	check(r.Unexpected, "unexpected")
	check(r.OrderViolations, "order violations")
	if r.LateAllowed == "" {
		check(r.LateCopies, "late copies (a version after a later one, in a run whose faults repeat none)")
	}
	if r.OverlapsAllowed == "" {
		check(max(r.Overlaps, 0), "overlapping publishes of two owners of one aggregate")
	}
	check(max(r.Unjournaled, 0), "rows published under an epoch whose publish is missing from the journal")
	check(r.Orphans, "orphan rows")
	check(r.Atomicity, "atomicity violations")
	check(r.EffectsMissing, "events without effect")
	check(r.EffectsMultiple, "events with more than one effect")
	check(r.EffectsUnexpected, "effects of events never committed")
	check(r.EffectOrderViolations, "effect order violations")
	if r.TimedOut {
		out = append(out, "the drain timed out")
	}
	return out
}

// journalFigures is the journal's part of a test's summary line: "" when
// the run kept none.
func (r report) journalFigures() string {
	if r.Journaled < 0 {
		return ""
	}
	return fmt.Sprintf("; %d publishes in the journal (%d never ended), %d pairs of two owners at once", r.Journaled, r.Unended, r.Overlaps)
}

// table renders the report for t.Log.
func (r report) table(title string) string {
	var b strings.Builder
	row := func(label string, n int, note string) {
		v := fmt.Sprint(n)
		if n < 0 {
			v = "-"
		}
		fmt.Fprintf(&b, "    %-28s %8s  %s\n", label, v, note)
	}
	fmt.Fprintf(&b, "checker: %s\n", title)
	b.WriteString("  producer\n")
	row("attempted", r.Attempted, "")
	row("committed", r.Committed, fmt.Sprintf("(%d of %d unknown outcomes committed)", r.UnknownCommitted, r.Unknown))
	row("rolled back on purpose", r.RolledBack, "")
	row("crashed before commit", r.Crashed, "")
	row("failed before commit", r.Failed, "")
	b.WriteString("  relay (Temporal)\n")
	row("events handed to runs", r.Signals, "(signals and one-shot starts)")
	row("handed over twice", r.DuplicateSignals, "absorbed by the aggregate workflow")
	b.WriteString("  transport (tap queue)\n")
	row("delivered, unique", r.Delivered, "")
	row("lost", r.Lost, "must be 0")
	row("unexpected", r.Unexpected, "must be 0")
	row("duplicate copies", r.DuplicateCopies, fmt.Sprintf("of %d events: at-least-once, allowed", r.DuplicatedIDs))
	row("order violations", r.OrderViolations, "must be 0 (per aggregate)")
	lateNote := "must be 0 (no fault here repeats a run of versions)"
	if r.LateAllowed != "" {
		lateNote = "allowed: " + r.LateAllowed
	}
	row("late copies", r.LateCopies, lateNote)
	b.WriteString("  publishers (journal of publishes under an owner epoch)\n")
	row("publishes recorded", r.Journaled, "(kept in the publish-first lane)")
	row("never ended", r.Unended, "publisher killed, or its end not written: taken to last until its bound")
	overlapNote := "must be 0 (at most one owner publishes an aggregate)"
	if r.OverlapsAllowed != "" {
		overlapNote = "allowed: " + r.OverlapsAllowed
	}
	row("two owners at once", r.Overlaps, overlapNote)
	row("marks not in the journal", r.Unjournaled, "must be 0")
	for i, o := range r.overlaps {
		if i == 5 {
			fmt.Fprintf(&b, "      … and %d more\n", len(r.overlaps)-i)
			break
		}
		fmt.Fprintf(&b, "      %s\n", o)
	}
	b.WriteString("  consumer (inbox)\n")
	row("effects exactly once", r.EffectsOnce, fmt.Sprintf("must be %d", r.Committed))
	row("events without effect", r.EffectsMissing, "must be 0")
	row("events with >1 effect", r.EffectsMultiple, "must be 0")
	row("effects not committed", r.EffectsUnexpected, "must be 0")
	row("effect order violations", r.EffectOrderViolations, "must be 0")
	row("redeliveries absorbed", r.Absorbed, "duplicate or stale at the inbox")
	b.WriteString("  store\n")
	row("orphan rows", r.Orphans, "must be 0")
	row("atomicity violations", r.Atomicity, "must be 0")
	verdict := "PASS"
	if f := r.failures(); len(f) > 0 {
		verdict = "FAIL: " + strings.Join(f, ", ")
	}
	fmt.Fprintf(&b, "  drained in %s; %s\n", r.Drained.Round(10*time.Millisecond), verdict)
	return b.String()
}

// checker runs a workload against one test's env and accounts for it.
type checker struct {
	t        *testing.T
	e        *env
	temporal client.Client // where the aggregate workflows live
	ns       string
	// noSignals skips reading the workflows' histories (a backlog of
	// thousands of aggregates would take minutes); the relay rows show "-".
	noSignals bool
	queue     string // the checker consumers' queue
	tap       *ledger
	stopTap   func()
	// journal: the run keeps the publish journal (the publish-first lane).
	journal bool
	// late and overlapping say why the run may have late copies or
	// overlapping owners (allowLate, the journal's negative control).
	late, overlapping string

	mu       sync.Mutex
	attempts map[string]attempt
}

// Checker consumer tables: the effect is written by the handler in the inbox
// transaction; deliveries are noted after each outcome, outside it.
const (
	sqlCreateEffects = `CREATE TABLE checker_effects (
    seq          bigserial PRIMARY KEY,
    event_id     text   NOT NULL,
    aggregate_id text   NOT NULL,
    version      bigint NOT NULL,
    pid          int    NOT NULL)`
	sqlCreateDeliveries = `CREATE TABLE checker_deliveries (
    event_id   text NOT NULL,
    outcome    text NOT NULL,
    deliveries int  NOT NULL,
    pid        int  NOT NULL)`
)

// newChecker prepares the consumer's tables and queue and starts the tap.
// Workflows are looked up on the shared Temporal server unless
// useTemporal points elsewhere.
func (e *env) newChecker(t *testing.T) *checker {
	t.Helper()
	ctx := context.Background()
	_, err := inbox.Migrate(ctx, e.db.Pool, nil)
	require.NoError(t, err)
	_, err = e.db.Pool.Exec(ctx, sqlCreateEffects)
	require.NoError(t, err)
	_, err = e.db.Pool.Exec(ctx, sqlCreateDeliveries)
	require.NoError(t, err)
	c := &checker{t: t, e: e, temporal: tclient, ns: namespace, queue: ferrytest.Name("ferry.checker"), attempts: map[string]attempt{}}
	if e.lane == poller.LanePublishFirst {
		// TestMain switches the journal on for every process of this binary;
		// the table decides which schemas keep one.
		require.True(t, publishjournal.Enabled, "the publish journal needs a build with -tags failpoints (make test sets it)")
		require.NoError(t, publishjournal.CreateTable(ctx, e.db.Pool))
		c.journal = true
	}
	t.Cleanup(func() { deleteConsumerQueues(t, e.br.URL, c.queue) })
	c.tap, c.stopTap = e.consume(t)
	return c
}

// withHandoffs routes the load's handoff events (load.handoff) to a
// workflow destination as well as to the broker, and runs the
// destination's workflows (which just complete) in this process. It
// returns the setting for Ferry's processes (FERRY_DESTINATIONS). In the
// publish-first lane such an event hands its aggregate to its workflow,
// which publishes it and the versions after it and gives the aggregate
// back when it has published all it holds: the load then crosses every
// change of ownership, relay to workflow and back, not only relay to
// relay.
func (c *checker) withHandoffs(t *testing.T) string {
	t.Helper()
	tq := ferrytest.Name("checker-sink")
	w := sdkworker.New(c.temporal, tq, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(func(workflow.Context, destination.Envelope) error { return nil },
		workflow.RegisterOptions{Name: "CheckerSink"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return fmt.Sprintf("FERRY_DESTINATIONS=%s.%s=start:sink,type=CheckerSink,queue=%s", c.e.aggType, handoffType, tq)
}

// allowLate says that this run's faults may repeat runs of versions, and
// why: its late copies are reported, not failed.
func (c *checker) allowLate(why string) { c.late = why }

// useTemporal makes the checker read signals from another Temporal server.
func (c *checker) useTemporal(tc client.Client, ns string) { c.temporal, c.ns = tc, ns }

// deleteConsumerQueues removes what a consumer declared for queue.
func deleteConsumerQueues(t *testing.T, amqpURL, queue string) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Errorf("delete the checker's queues: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("delete the checker's queues: %v", err)
		return
	}
	ferrytest.DeleteConsumerTopology(ch, queue)
}

// startConsumer runs a checker consumer process (see checkerConsumerMain).
func (c *checker) startConsumer(t *testing.T, extraEnv ...string) *child {
	t.Helper()
	return c.e.spawn(t, []string{"consumer"}, append([]string{childEnv + "=consumer", checkerQueueEnv + "=" + c.queue}, extraEnv...)...)
}

// waitConsuming waits until the consumer queue exists and has a consumer, so
// that nothing published before is missed (the tap has its own queue).
func (c *checker) waitConsuming(t *testing.T) {
	t.Helper()
	conn, err := amqp.Dial(c.e.br.URL)
	require.NoError(t, err)
	defer conn.Close()
	waitFor(t, 60*time.Second, "a checker consumer on "+c.queue, func() bool {
		ch, err := conn.Channel()
		if err != nil {
			return false
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(c.queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		return err == nil && q.Consumers > 0
	})
}

// load is a producer workload.
type load struct {
	producers  int           // default 3
	aggregates int           // default 12
	pause      time.Duration // between one producer's transactions; default 50ms
	rollback   int           // percent rolled back on purpose; default 10
	crash      int           // percent cut off before COMMIT; default 5
	limit      int           // stop after this many attempts in all; 0: when stopped
	// handoff is the percent of events of type handoffType, which a test
	// may route to a workflow destination (withHandoffs); default 0.
	handoff int
}

// handoffType is the event type of the load's handoff events.
const handoffType = "handoff"

// startLoad runs the workload in the background; stop ends it and waits.
func (c *checker) startLoad(l load) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.produce(ctx, l) }()
	return sync.OnceFunc(func() { cancel(); <-done })
}

// runLoad runs a workload of l.limit attempts to the end.
func (c *checker) runLoad(l load) {
	c.t.Helper()
	require.Positive(c.t, l.limit)
	c.produce(context.Background(), l)
}

// produce runs the workload until ctx ends or l.limit attempts were made.
func (c *checker) produce(ctx context.Context, l load) {
	l.producers = cmp.Or(l.producers, 3)
	l.aggregates = cmp.Or(l.aggregates, 12)
	l.pause = cmp.Or(l.pause, 50*time.Millisecond)
	l.rollback = cmp.Or(l.rollback, 10)
	l.crash = cmp.Or(l.crash, 5)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		count int
	)
	for range l.producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				if l.limit > 0 && count >= l.limit {
					mu.Unlock()
					return
				}
				count++
				mu.Unlock()
				want := committed
				switch r := rand.IntN(100); {
				case r < l.rollback:
					want = rolledBack
				case r < l.rollback+l.crash:
					want = crashed
				}
				typ := "changed"
				if rand.IntN(100) < l.handoff {
					typ = handoffType
				}
				c.transactType(aggID(rand.IntN(l.aggregates)), typ, want)
				select {
				case <-ctx.Done():
				case <-time.After(l.pause):
				}
			}
		})
	}
	wg.Wait()
}

// transact writes one business row and its event in one transaction and
// ends it as want says; it records the outcome and returns the event id.
func (c *checker) transact(aggID string, want outcome) string {
	return c.transactType(aggID, "changed", want)
}

// transactType is transact with an event of type eventType.
func (c *checker) transactType(aggID, eventType string, want outcome) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := uuid.Must(uuid.NewV7())
	c.record(id.String(), aggID, indeterminate)
	conn, err := c.e.db.Pool.Acquire(ctx)
	if err != nil {
		c.record(id.String(), aggID, failed)
		return id.String()
	}
	defer conn.Release()
	got := c.write(ctx, conn.Conn(), id, aggID, eventType, want)
	if got == crashed {
		// The process died with its transaction open: the server sees the
		// socket close, and aborts.
		raw := conn.Hijack()
		_ = raw.PgConn().Conn().Close()
		_ = raw.Close(ctx)
	}
	c.record(id.String(), aggID, got)
	return id.String()
}

// hold writes one business row and its event and leaves the transaction
// open until commit is called: an event that took its id, created_at and
// next_attempt_at before everything the workload writes meanwhile, and
// becomes visible after all of it.
func (c *checker) hold(aggID string) (id string, commit func()) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	uid := uuid.Must(uuid.NewV7())
	c.record(uid.String(), aggID, indeterminate)
	tx, err := c.e.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO orders (id, note) VALUES ($1, $2)`, uid.String(), aggID)
	require.NoError(t, err)
	_, err = c.e.writer.Write(ctx, tx, outbox.Event{ID: uid, AggregateType: c.e.aggType, AggregateID: aggID, EventType: "changed", Payload: []byte(`{}`)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return uid.String(), func() {
		require.NoError(t, tx.Commit(ctx))
		c.record(uid.String(), aggID, committed)
	}
}

func (c *checker) write(ctx context.Context, conn *pgx.Conn, id uuid.UUID, aggID, eventType string, want outcome) outcome {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return failed
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, note) VALUES ($1, $2)`, id.String(), aggID); err != nil {
		_ = tx.Rollback(ctx)
		return failed
	}
	payload, _ := json.Marshal(map[string]string{"order": id.String()})
	if _, err := c.e.writer.Write(ctx, tx, outbox.Event{ID: id, AggregateType: c.e.aggType, AggregateID: aggID, EventType: eventType, Payload: payload}); err != nil {
		_ = tx.Rollback(ctx)
		return failed
	}
	switch want {
	case rolledBack:
		if err := tx.Rollback(ctx); err != nil {
			return failed
		}
		return rolledBack
	case crashed:
		return crashed
	}
	if err := tx.Commit(ctx); err != nil {
		return indeterminate
	}
	return committed
}

func (c *checker) record(id, aggID string, o outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts[id] = attempt{aggID: aggID, outcome: o}
}

// count returns the attempts so far with outcome o.
func (c *checker) count(o outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, a := range c.attempts {
		if a.outcome == o {
			n++
		}
	}
	return n
}

// check drains (every committed event delivered, applied and marked
// published, or timeout), accounts, logs the table and fails the test unless
// the contract held. The load must be stopped.
func (c *checker) check(timeout time.Duration) report {
	t := c.t
	t.Helper()
	start := time.Now()
	ctx := context.Background()
	var (
		stored   map[string]bool
		want     []string
		timedOut bool
	)
	snapshot := func() {
		stored = c.storedIDs(ctx)
		want = want[:0]
		c.mu.Lock()
		for id, a := range c.attempts {
			if a.outcome == committed || (a.outcome == indeterminate && stored[id]) {
				want = append(want, id)
			}
		}
		c.mu.Unlock()
	}
	snapshot()
	deadline := time.Now().Add(timeout)
	for {
		if c.drained(ctx, want) {
			break
		}
		if time.Now().After(deadline) {
			timedOut = true
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	drained := time.Since(start)
	diagnosis := ""
	if timedOut {
		// Read where the missing events are before the tap stops.
		diagnosis = c.diagnose(want)
	}
	if !timedOut {
		// Late copies (a publish repeated after a lost mark) still count.
		time.Sleep(time.Second)
	}
	c.stopTap()
	snapshot()

	h := history{stored: stored, orphans: c.orphans(ctx), absorbed: c.absorbed(ctx)}
	c.mu.Lock()
	h.attempts = make(map[string]attempt, len(c.attempts))
	for id, a := range c.attempts {
		h.attempts[id] = a
	}
	c.mu.Unlock()
	c.tap.mu.Lock()
	for _, d := range c.tap.all {
		h.tap = append(h.tap, observation{id: d.id, aggID: d.aggID, version: d.version})
	}
	c.tap.mu.Unlock()
	h.effects = c.effects(ctx)
	h.late, h.overlapping = c.late, c.overlapping
	if c.journal {
		h.journal, h.marks = c.readJournal(ctx)
	}
	if !c.noSignals {
		h.signals = c.signalCounts(ctx)
	}
	r := account(h)
	r.Drained, r.TimedOut = drained, timedOut
	t.Log("\n" + r.table(t.Name()))
	if f := r.failures(); len(f) > 0 {
		if diagnosis == "" {
			diagnosis = c.diagnose(want)
		}
		t.Log("\n" + diagnosis)
		t.Errorf("the delivery contract broke: %s", strings.Join(f, ", "))
	}
	return r
}

// drained: every wanted event is on the tap and has an effect, and no
// outbox row waits.
func (c *checker) drained(ctx context.Context, want []string) bool {
	c.tap.mu.Lock()
	for _, id := range want {
		if !c.tap.seen[id] {
			c.tap.mu.Unlock()
			return false
		}
	}
	c.tap.mu.Unlock()
	var effects, waiting int
	err := c.e.db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(DISTINCT event_id) FROM checker_effects WHERE event_id = ANY($1)),
		(SELECT count(*) FROM outbox_events WHERE status <> 'published')`, want).Scan(&effects, &waiting)
	return err == nil && effects == len(want) && waiting == 0
}

func (c *checker) storedIDs(ctx context.Context) map[string]bool {
	rows, err := c.e.db.Pool.Query(ctx, `SELECT id::text FROM outbox_events`)
	require.NoError(c.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(c.t, err)
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

func (c *checker) orphans(ctx context.Context) int {
	var n int
	require.NoError(c.t, c.e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM orders o
		FULL JOIN outbox_events ev ON ev.id::text = o.id WHERE o.id IS NULL OR ev.id IS NULL`).Scan(&n))
	return n
}

func (c *checker) absorbed(ctx context.Context) int {
	var n int
	require.NoError(c.t, c.e.db.Pool.QueryRow(ctx,
		`SELECT count(*) FROM checker_deliveries WHERE outcome IN ('duplicate', 'stale')`).Scan(&n))
	return n
}

func (c *checker) effects(ctx context.Context) []observation {
	rows, err := c.e.db.Pool.Query(ctx, `SELECT event_id, aggregate_id, version FROM checker_effects ORDER BY seq`)
	require.NoError(c.t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (observation, error) {
		var o observation
		return o, r.Scan(&o.id, &o.aggID, &o.version)
	})
	require.NoError(c.t, err)
	return out
}

// readJournal reads the publish journal and the rows marked published
// under an epoch. A publish that never ended is taken to last until its
// bound (the claim plus the lease, or the activity attempt's deadline:
// until then no other owner may take the aggregate), or to the end of
// time when it has none.
func (c *checker) readJournal(ctx context.Context) ([]publishRecord, []epochMark) {
	recs, err := publishjournal.Read(ctx, c.e.db.Pool)
	require.NoError(c.t, err)
	journal := make([]publishRecord, 0, len(recs))
	for _, r := range recs {
		p := publishRecord{aggID: r.AggregateID, first: r.First, last: r.Last, epoch: r.Epoch, party: r.Party,
			start: r.Started, end: r.Ended, ended: !r.Ended.IsZero(), outcome: r.Outcome}
		if !p.ended {
			p.end = r.Bound
			if p.end.IsZero() {
				p.end = time.Unix(1<<40, 0)
			}
		}
		journal = append(journal, p)
	}
	rows, err := c.e.db.Pool.Query(ctx, `SELECT aggregate_id, aggregate_version, owner_epoch FROM outbox_events
		WHERE status = 'published' AND owner_epoch > 0`)
	require.NoError(c.t, err)
	marks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (epochMark, error) {
		var m epochMark
		return m, r.Scan(&m.aggID, &m.version, &m.epoch)
	})
	require.NoError(c.t, err)
	return journal, marks
}

// touchedAggregates lists, sorted, the aggregate ids the workload wrote to.
func (c *checker) touchedAggregates() []string {
	seen := map[string]bool{}
	c.mu.Lock()
	for _, a := range c.attempts {
		seen[a.aggID] = true
	}
	c.mu.Unlock()
	ids := make([]string, 0, len(seen))
	for a := range seen {
		ids = append(ids, a)
	}
	slices.Sort(ids)
	return ids
}

// signalCounts reads, from every run of every aggregate workflow the workload
// touched, how often Temporal recorded each event id as handed to a run: in
// an events signal, or in the input of a one-shot start (a poller whose
// lease ran out starts a fresh run with the same events when the first has
// completed; a continue-as-new input carries events already counted, so it
// is left out).
func (c *checker) signalCounts(ctx context.Context) map[string]int {
	t := c.t
	ids := c.touchedAggregates()
	counts := map[string]int{}
	dc := converter.GetDefaultDataConverter()
	for _, agg := range ids {
		wfID := workflows.WorkflowID(c.e.aggType, agg)
		var token []byte
		for {
			resp, err := c.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
				Namespace: c.ns, Query: fmt.Sprintf("WorkflowId = '%s'", wfID), NextPageToken: token,
			})
			require.NoError(t, err)
			for _, ex := range resp.Executions {
				it := c.temporal.GetWorkflowHistory(ctx, wfID, ex.Execution.RunId, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
				for it.HasNext() {
					ev, err := it.Next()
					require.NoError(t, err)
					if st := ev.GetWorkflowExecutionStartedEventAttributes(); st != nil && st.ContinuedExecutionRunId == "" {
						var in workflows.AggregateInput
						require.NoError(t, dc.FromPayloads(st.Input, &in))
						for _, ref := range in.Pending {
							counts[ref.ID]++
						}
						continue
					}
					attrs := ev.GetWorkflowExecutionSignaledEventAttributes()
					if attrs == nil || attrs.SignalName != workflows.EventsSignal {
						continue
					}
					var arg workflows.EventsSignalArg
					require.NoError(t, dc.FromPayloads(attrs.Input, &arg))
					for _, ref := range arg.Events {
						counts[ref.ID]++
					}
				}
			}
			token = resp.NextPageToken
			if len(token) == 0 {
				break
			}
		}
	}
	return counts
}

// The checker's judgement on made-up histories: it sees each kind of
// breach, and passes what the contract allows (duplicates).
func TestCheckerAccounting(t *testing.T) {
	t.Parallel()
	obs := func(id, agg string, v int64) observation { return observation{id: id, aggID: agg, version: v} }
	// pub is a publish of agg's versions first..last under epoch by relay
	// r<epoch>, from second start to second end of the day.
	pub := func(agg string, first, last, epoch int64, start, end int, ended bool) publishRecord {
		day := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		return publishRecord{aggID: agg, first: first, last: last, epoch: epoch, party: fmt.Sprintf("relay r%d", epoch),
			start: day.Add(time.Duration(start) * time.Second), end: day.Add(time.Duration(end) * time.Second), ended: ended}
	}
	attempts := map[string]attempt{
		"a1": {"a", committed}, "a2": {"a", committed}, "b1": {"b", committed},
		"rb": {"a", rolledBack}, "cr": {"b", crashed}, "u1": {"b", indeterminate}, "u2": {"a", indeterminate},
	}
	stored := map[string]bool{"a1": true, "a2": true, "b1": true, "u1": true}
	clean := func() history {
		return history{
			attempts: attempts, stored: stored,
			tap:     []observation{obs("a1", "a", 1), obs("b1", "b", 1), obs("a2", "a", 2), obs("u1", "b", 2)},
			effects: []observation{obs("b1", "b", 1), obs("a1", "a", 1), obs("u1", "b", 2), obs("a2", "a", 2)},
			signals: map[string]int{"a1": 1, "a2": 1, "b1": 1, "u1": 1},
		}
	}
	tests := []struct {
		name   string
		change func(h *history)
		check  func(t *testing.T, r report)
	}{
		{"clean", func(*history) {}, func(t *testing.T, r report) {
			require.Empty(t, r.failures())
			require.Equal(t, report{Attempted: 7, Committed: 4, RolledBack: 1, Crashed: 1, Unknown: 2, UnknownCommitted: 1,
				Signals: 4, Delivered: 4, EffectsOnce: 4, Journaled: -1, Unended: -1, Overlaps: -1, Unjournaled: -1}, r)
		}},
		{"duplicates are reported, not failed", func(h *history) {
			h.tap = []observation{obs("a1", "a", 1), obs("a1", "a", 1), obs("b1", "b", 1), obs("a1", "a", 1), obs("b1", "b", 1),
				obs("a2", "a", 2), obs("u1", "b", 2)}
			h.signals["a2"] = 3
			h.absorbed = 2
		}, func(t *testing.T, r report) {
			require.Empty(t, r.failures())
			require.Equal(t, 3, r.DuplicateCopies)
			require.Equal(t, 2, r.DuplicatedIDs)
			require.Equal(t, 2, r.DuplicateSignals)
			require.Equal(t, 2, r.Absorbed)
		}},
		{"lost", func(h *history) { h.tap = slices.Delete(slices.Clone(h.tap), 3, 4) }, func(t *testing.T, r report) {
			require.Equal(t, 1, r.Lost)
			require.Equal(t, []string{"1 lost"}, r.failures())
		}},
		{"unexpected: rolled back, crashed, unknown and never attempted", func(h *history) {
			h.tap = append(h.tap, obs("rb", "a", 3), obs("cr", "b", 3), obs("u2", "a", 3), obs("zz", "c", 1))
		}, func(t *testing.T, r report) {
			require.Equal(t, 4, r.Unexpected)
			require.Equal(t, []string{"4 unexpected"}, r.failures())
		}},
		{"order: a late version and an early one", func(h *history) {
			h.tap = []observation{obs("a2", "a", 2), obs("a1", "a", 1), obs("b1", "b", 1), obs("u1", "b", 2)}
		}, func(t *testing.T, r report) {
			require.Equal(t, 2, r.OrderViolations)
		}},
		{"a duplicate of an earlier version is no order violation", func(h *history) {
			h.tap = append(h.tap, obs("a1", "a", 1))
		}, func(t *testing.T, r report) {
			require.Zero(t, r.OrderViolations)
		}},
		{"effects: missing, twice, unexpected, out of order", func(h *history) {
			h.effects = []observation{obs("a2", "a", 2), obs("a1", "a", 1), obs("b1", "b", 1), obs("b1", "b", 1), obs("rb", "a", 3)}
		}, func(t *testing.T, r report) {
			require.Equal(t, 1, r.EffectsMissing)
			require.Equal(t, 1, r.EffectsMultiple)
			require.Equal(t, 1, r.EffectsUnexpected)
			require.Equal(t, 2, r.EffectOrderViolations)
			require.Len(t, r.failures(), 4)
		}},
		{"orphans", func(h *history) { h.orphans = 2 }, func(t *testing.T, r report) {
			require.Equal(t, []string{"2 orphan rows"}, r.failures())
		}},
		{"atomicity: a commit not stored, an abort stored", func(h *history) {
			h.stored = map[string]bool{"a2": true, "b1": true, "u1": true, "rb": true}
		}, func(t *testing.T, r report) {
			require.Equal(t, 2, r.Atomicity)
		}},
		{"a late copy: a duplicate after a later version's first copy", func(h *history) {
			h.tap = append(h.tap, obs("a1", "a", 1))
		}, func(t *testing.T, r report) {
			require.Equal(t, 1, r.LateCopies)
			require.Equal(t, []string{"1 late copies (a version after a later one, in a run whose faults repeat none)"}, r.failures())
			require.Regexp(t, `late copies +1  must be 0`, r.table("x"))
		}},
		{"a duplicate before the next version is not late", func(h *history) {
			h.tap = []observation{obs("a1", "a", 1), obs("a1", "a", 1), obs("b1", "b", 1), obs("a2", "a", 2), obs("a2", "a", 2), obs("u1", "b", 2)}
		}, func(t *testing.T, r report) {
			require.Zero(t, r.LateCopies)
			require.Equal(t, 2, r.DuplicateCopies)
			require.Empty(t, r.failures())
		}},
		{"two publishers interleaved: first copies in order, the late copy shows them", func(h *history) {
			h.tap = []observation{obs("a1", "a", 1), obs("b1", "b", 1), obs("a2", "a", 2), obs("a1", "a", 1), obs("a2", "a", 2), obs("u1", "b", 2)}
		}, func(t *testing.T, r report) {
			require.Zero(t, r.OrderViolations)
			require.Equal(t, 1, r.LateCopies)
			require.Len(t, r.failures(), 1)
		}},
		{"late copies the run's faults allow are reported, not failed", func(h *history) {
			h.tap = append(h.tap, obs("a1", "a", 1), obs("b1", "b", 1))
			h.late = "relays killed after the confirm"
		}, func(t *testing.T, r report) {
			require.Equal(t, 2, r.LateCopies)
			require.Empty(t, r.failures())
			require.Regexp(t, `late copies +2  allowed: relays killed after the confirm`, r.table("x"))
		}},
		{"journal: two owners at once", func(h *history) {
			h.journal = []publishRecord{pub("a", 1, 2, 7, 0, 10, true), pub("a", 1, 2, 8, 5, 12, true), pub("b", 1, 2, 7, 5, 12, true)}
			h.marks = []epochMark{{"a", 1, 8}, {"a", 2, 8}, {"b", 1, 7}, {"b", 2, 7}}
		}, func(t *testing.T, r report) {
			require.Equal(t, 3, r.Journaled)
			require.Equal(t, 1, r.Overlaps)
			require.Zero(t, r.Unjournaled)
			require.Equal(t, []string{"1 overlapping publishes of two owners of one aggregate"}, r.failures())
			require.Contains(t, r.table("x"), "a: epoch 7 (relay r7, v1-2, from 00:00:00.000000, ended 00:00:10.000000) and epoch 8 (relay r8, v1-2, from 00:00:05.000000, ended 00:00:12.000000)")
		}},
		{"journal: one owner after the other, and one owner twice at once, overlap nothing", func(h *history) {
			h.journal = []publishRecord{pub("a", 1, 1, 7, 0, 5, true), pub("a", 2, 2, 8, 5, 8, true), pub("a", 2, 2, 8, 6, 7, true)}
			h.marks = []epochMark{{"a", 1, 7}, {"a", 2, 8}}
		}, func(t *testing.T, r report) {
			require.Zero(t, r.Overlaps)
			require.Empty(t, r.failures())
		}},
		{"journal: a killed publisher lasts until its bound", func(h *history) {
			h.journal = []publishRecord{pub("a", 1, 2, 7, 0, 12, false), pub("a", 1, 2, 8, 10, 11, true),
				pub("b", 1, 2, 7, 0, 9, false), pub("b", 1, 2, 8, 10, 11, true)}
		}, func(t *testing.T, r report) {
			require.Equal(t, 2, r.Unended)
			require.Equal(t, 1, r.Overlaps, "a's bound is after the next owner's start, b's before it")
			require.Contains(t, r.table("x"), "never ended; bound 00:00:12.000000")
		}},
		{"journal: a row marked under an epoch whose publish it has not", func(h *history) {
			h.journal = []publishRecord{pub("a", 1, 2, 7, 0, 1, true)}
			h.marks = []epochMark{{"a", 1, 7}, {"a", 2, 7}, {"a", 3, 7}, {"b", 1, 9}}
		}, func(t *testing.T, r report) {
			require.Equal(t, 2, r.Unjournaled)
			require.Equal(t, []string{"2 rows published under an epoch whose publish is missing from the journal"}, r.failures())
		}},
		{"journal: overlaps the negative control allows are reported, not failed", func(h *history) {
			h.journal = []publishRecord{pub("a", 1, 2, 7, 0, 10, true), pub("a", 1, 2, 8, 5, 12, true)}
			h.overlapping = "lease shorter than a stalled publish"
		}, func(t *testing.T, r report) {
			require.Equal(t, 1, r.Overlaps)
			require.Empty(t, r.failures())
			require.Regexp(t, `two owners at once +1  allowed: lease shorter`, r.table("x"))
		}},
		{"journal not kept", func(*history) {}, func(t *testing.T, r report) {
			require.Regexp(t, `two owners at once +- `, r.table("x"))
		}},
		{"signals not counted", func(h *history) { h.signals = nil }, func(t *testing.T, r report) {
			require.Equal(t, -1, r.Signals)
			require.Equal(t, -1, r.DuplicateSignals)
			require.Regexp(t, `handed over twice +- `, r.table("x"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := clean()
			tt.change(&h)
			tt.check(t, account(h))
		})
	}
}
