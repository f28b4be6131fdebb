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

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/outbox"
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
// It fails the test unless lost, unexpected, order violations, orphans and
// atomicity violations are zero and every committed event has exactly one
// effect. Duplicates are reported, not failed: they are allowed at the
// transport layers and absorbed by the inbox.

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

// history is what the checker gathered after the drain.
type history struct {
	attempts map[string]attempt // by event id
	stored   map[string]bool    // event ids in outbox_events
	tap      []observation      // every copy on the tap queue, in arrival order
	signals  map[string]int     // event id → times handed to a run (signals, one-shot starts); nil: not counted
	effects  []observation      // the consumer's effect rows, in commit order
	absorbed int                // deliveries the inbox dropped (duplicate or stale)
	orphans  int                // business rows without an event, or the reverse
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
	t.Cleanup(func() { deleteConsumerQueues(t, e.br.URL, c.queue) })
	c.tap, c.stopTap = e.consume(t)
	return c
}

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
}

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
				c.transact(aggID(rand.IntN(l.aggregates)), want)
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
	got := c.write(ctx, conn.Conn(), id, aggID, want)
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

func (c *checker) write(ctx context.Context, conn *pgx.Conn, id uuid.UUID, aggID string, want outcome) outcome {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return failed
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, note) VALUES ($1, $2)`, id.String(), aggID); err != nil {
		_ = tx.Rollback(ctx)
		return failed
	}
	payload, _ := json.Marshal(map[string]string{"order": id.String()})
	if _, err := c.e.writer.Write(ctx, tx, outbox.Event{ID: id, AggregateType: c.e.aggType, AggregateID: aggID, EventType: "changed", Payload: payload}); err != nil {
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
				Signals: 4, Delivered: 4, EffectsOnce: 4}, r)
		}},
		{"duplicates are reported, not failed", func(h *history) {
			h.tap = append(h.tap, obs("a1", "a", 1), obs("a1", "a", 1), obs("b1", "b", 1))
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
