package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/ferry-outbox/ferry/internal/failpoint"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/workflows"
)

// The publish-first lane's races against the real services (issue 24,
// "Handoff and its races"): relays killed at the lane's crash points,
// competing relays, poll and WAL sources together, and runs completing
// while new events arrive (late confirms and a confirm wait that outlives
// the lease are in lane_stall_test.go, Temporal away in
// lane_outage_test.go). Each test says in a comment what would make it
// fail. The tap (env.consume) records every copy; the rows record the
// owner epoch each event was published under and the relay that claimed
// it last.

// laneEnv is the environment of a `ferry run|poller` process of the lane.
const laneEnv = "FERRY_LANE=" + poller.LanePublishFirst

// laneLoad commits events of type "changed" at a steady pace from a few
// producers, each over aggregates of its own share, and records when each
// commit returned.
type laneLoad struct {
	mu        sync.Mutex
	committed []committedEvent
	stop      func()
}

// committedEvent is one committed event as its producer saw it.
type committedEvent struct {
	id, aggID string
	at        time.Time // Commit returned
}

// startLaneLoad runs producers until stop: producer p commits to
// aggregates[p], aggregates[p+producers], … in turn, pausing between
// commits.
func (e *env) startLaneLoad(t *testing.T, producers int, aggregates []string, pause time.Duration) *laneLoad {
	t.Helper()
	return e.startLaneBursts(t, producers, aggregates, pause, 1)
}

// startLaneBursts is startLaneLoad committing burst events to each
// aggregate in a row (one transaction each) before pausing: relays then
// find an aggregate's next versions committed while they publish its
// earlier ones.
func (e *env) startLaneBursts(t *testing.T, producers int, aggregates []string, pause time.Duration, burst int) *laneLoad {
	t.Helper()
	require.GreaterOrEqual(t, len(aggregates), producers, "a producer needs an aggregate")
	ctx, cancel := context.WithCancel(context.Background())
	ll := &laneLoad{}
	var wg sync.WaitGroup
	for p := range producers {
		var mine []string
		for i := p; i < len(aggregates); i += producers {
			mine = append(mine, aggregates[i])
		}
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				agg := mine[i%len(mine)]
				for range burst {
					id, err := e.commit(context.Background(), agg, false)
					if err != nil {
						t.Errorf("commit an event of %s: %v", agg, err)
						return
					}
					ll.add(committedEvent{id: id, aggID: agg, at: time.Now()})
				}
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		})
	}
	ll.stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(ll.stop)
	return ll
}

func (ll *laneLoad) add(c committedEvent) {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	ll.committed = append(ll.committed, c)
}

// events is what was committed so far.
func (ll *laneLoad) events() []committedEvent {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	return slices.Clone(ll.committed)
}

// eventIDs is the set of committed event ids.
func eventIDs(events []committedEvent) map[string]bool {
	out := make(map[string]bool, len(events))
	for _, c := range events {
		out[c.id] = true
	}
	return out
}

// aggregateNames is prefix-0 … prefix-(n-1).
func aggregateNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// waitDelivered waits until the tap has seen every id at least once.
func waitDelivered(t *testing.T, l *ledger, want map[string]bool, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("%d events delivered", len(want)), func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for id := range want {
			if !l.seen[id] {
				return false
			}
		}
		return true
	})
}

// tapAccount is what the tap saw, copy by copy.
type tapAccount struct {
	copies int
	// duplicates: copies after an id's first; dupIDs: their ids, with how
	// many copies beyond the first each had.
	duplicates int
	dupIDs     map[string]int
	// late: copies that arrived after the first copy of a later version of
	// their aggregate (a first copy among them is also an order violation,
	// which requireInOrder reports); lateCopies describes the first few.
	late       int
	lateCopies []string
	// firstAt: when each id's first copy arrived.
	firstAt map[string]time.Time
}

// account reads every copy the tap received, in arrival order.
func (l *ledger) account() tapAccount {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := tapAccount{dupIDs: map[string]int{}, firstAt: map[string]time.Time{}}
	top := map[string]int64{} // per aggregate, the highest version whose first copy arrived
	for _, d := range l.all {
		a.copies++
		_, seen := a.firstAt[d.id]
		if seen {
			a.duplicates++
			a.dupIDs[d.id]++
		} else {
			a.firstAt[d.id] = d.at
		}
		if d.version < top[d.aggID] {
			a.late++
			if len(a.lateCopies) < 10 {
				a.lateCopies = append(a.lateCopies, fmt.Sprintf("%s v%d (id %s) at %s after v%d",
					d.aggID, d.version, d.id, d.at.Format("15:04:05.000"), top[d.aggID]))
			}
		}
		if !seen {
			top[d.aggID] = max(top[d.aggID], d.version)
		}
	}
	return a
}

// latencies are the commit-to-first-delivery times of events.
func latencies(events []committedEvent, firstAt map[string]time.Time) []time.Duration {
	var out []time.Duration
	for _, c := range events {
		if at, ok := firstAt[c.id]; ok {
			out = append(out, at.Sub(c.at))
		}
	}
	slices.Sort(out)
	return out
}

// percentile is the p-th percentile (0-100) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

// laneRow is one row of outbox_events as the lane left it.
type laneRow struct {
	id, aggID, status, claimedBy string
	version, epoch               int64
	publishedAt                  time.Time
}

// laneRows reads the test's rows, per aggregate in version order.
func (e *env) laneRows(t *testing.T) []laneRow {
	t.Helper()
	rows, err := e.db.Pool.Query(context.Background(), `
		SELECT id::text, aggregate_id, status, coalesce(claimed_by, ''), aggregate_version, coalesce(owner_epoch, 0),
		       coalesce(published_at, 'epoch'::timestamptz)
		FROM outbox_events ORDER BY aggregate_id, aggregate_version`)
	require.NoError(t, err)
	defer rows.Close()
	var out []laneRow
	for rows.Next() {
		var r laneRow
		require.NoError(t, rows.Scan(&r.id, &r.aggID, &r.status, &r.claimedBy, &r.version, &r.epoch, &r.publishedAt))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// requireFenced checks what the rows say about who published them: every
// row is published under an owner epoch, along each aggregate's versions
// the epochs never go down (a later owner never published an earlier
// version), and — when relayOnly, in runs without handoffs — every epoch
// belongs to one relay (claimed_by). Two relays publishing one aggregate
// at once would mark under two epochs in turn, or one would have its marks
// refused and its rows published again under a later epoch: duplicates
// and late copies at the tap. It returns the rows each relay published.
func requireFenced(t *testing.T, rows []laneRow, relayOnly bool) map[string]int {
	t.Helper()
	byRelay := map[string]int{}
	holder := map[int64]string{}
	last := map[string]laneRow{}
	for _, r := range rows {
		require.Equal(t, "published", r.status, "aggregate %s v%d (id %s) is %s", r.aggID, r.version, r.id, r.status)
		require.Positive(t, r.epoch, "aggregate %s v%d was published under an owner epoch", r.aggID, r.version)
		if p, ok := last[r.aggID]; ok {
			require.GreaterOrEqual(t, r.epoch, p.epoch, "aggregate %s: v%d published under epoch %d after v%d under %d",
				r.aggID, r.version, r.epoch, p.version, p.epoch)
		}
		last[r.aggID] = r
		if relayOnly {
			if h, ok := holder[r.epoch]; ok {
				require.Equal(t, h, r.claimedBy, "epoch %d (aggregate %s) held by two relays", r.epoch, r.aggID)
			}
			holder[r.epoch] = r.claimedBy
		}
		byRelay[r.claimedBy]++
	}
	return byRelay
}

// relayName is the poller name of a `ferry` child process (host-pid).
func relayName(c *child) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, c.cmd.Process.Pid)
}

// pendingOwnedBy is the pending rows of the aggregates relay owns: a
// direct claim leaves the rows themselves alone, its lease is the owner
// row's.
func (e *env) pendingOwnedBy(t *testing.T, relay string) map[string]bool {
	t.Helper()
	rows, err := e.db.Pool.Query(context.Background(), `
		SELECT e.id::text FROM outbox_events e
		JOIN outbox_owners o ON o.aggregate_type = e.aggregate_type AND o.aggregate_id = e.aggregate_id
		WHERE e.status = 'pending' AND o.owner = 'relay' AND o.holder = $1`, relay)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := map[string]bool{}
	for _, id := range got {
		out[id] = true
	}
	return out
}

// requireLaneEmpty waits until no aggregate is owned: every relay and
// every run gave its aggregates back.
func (e *env) requireLaneEmpty(t *testing.T, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "outbox_owners empty", func() bool { return e.count(t, `SELECT count(*) FROM outbox_owners`) == 0 })
}

// A `ferry run` of the lane SIGKILLed at lane.after-confirm: the broker
// confirmed a round's messages, the rows are not marked. A fresh process
// takes the aggregates over when the dead relay's lease (12 s) runs out
// and publishes those rows again: each of them arrives exactly twice,
// nothing is lost, and the first copies keep every aggregate's order.
//
// What breaks it: marking before publishing, or a mark that is not the
// confirm's (the killed round would be lost: the completeness check); a
// takeover that skips the unmarked rows (lost, or the order check); the
// kill not landing between the confirm and the mark (no duplicate: the
// duplicates must be exactly the killed round's rows).
func TestLaneRelayKilledAfterConfirm(t *testing.T) {
	t.Parallel()
	require.True(t, failpoint.Enabled, "failpoints need a build with -tags failpoints (make test sets it)")
	e := setup(t)
	l, _ := e.consume(t)
	victim := e.startProcess(t, "run", laneEnv, "FERRY_FAILPOINTS=lane.after-confirm=exit@5")
	load := e.startLaneLoad(t, 4, aggregateNames("agg", 8), 50*time.Millisecond)
	victim.waitExit(t, time.Minute)
	killed := time.Now()
	require.Contains(t, victim.out.String(), "failpoint lane.after-confirm: killing process", "died at the failpoint")
	// The killed round: rows the broker confirmed (in the queue already,
	// so the tap sees them) whose aggregates the dead relay still owns.
	owned := e.pendingOwnedBy(t, relayName(victim))
	time.Sleep(time.Second) // what was confirmed reaches the tap
	unmarked := map[string]bool{}
	seen := l.account()
	for id := range owned {
		if _, ok := seen.firstAt[id]; ok {
			unmarked[id] = true
		}
	}
	require.NotEmpty(t, unmarked, "the killed round's rows are pending, their aggregates the dead relay's")

	replacement := e.startProcess(t, "run", laneEnv)
	waitFor(t, time.Minute, "the killed round published again", func() bool {
		a := l.account()
		for id := range unmarked {
			if a.dupIDs[id] == 0 {
				return false
			}
		}
		return true
	})
	again := time.Since(killed)
	time.Sleep(2 * time.Second) // load on after the takeover
	load.stop()
	all := eventIDs(load.events())
	waitDelivered(t, l, all, 2*time.Minute)
	e.requireLaneEmpty(t, 30*time.Second)
	acct := l.account()
	t.Logf("killed after the confirm of %d rows; published again %s after the kill (lease 12 s); %d events, %d copies, %d duplicates, %d late copies",
		len(unmarked), again.Round(100*time.Millisecond), len(all), acct.copies, acct.duplicates, acct.late)
	l.requireInOrder(t)
	dups := map[string]bool{}
	for id, n := range acct.dupIDs {
		require.Equal(t, 1, n, "event %s arrived %d times", id, n+1)
		dups[id] = true
	}
	require.Equal(t, unmarked, dups, "the duplicates are exactly the rows confirmed and not marked")
	byRelay := requireFenced(t, e.laneRows(t), true)
	require.Equal(t, len(unmarked), e.count(t, `SELECT count(*) FROM outbox_events WHERE id = ANY($1::uuid[]) AND claimed_by = $2`,
		slices.Collect(maps.Keys(unmarked)), relayName(replacement)), "the replacement marked the killed round")
	t.Logf("rows marked per relay: %v", byRelay)
}

// A `ferry run` of the lane SIGKILLed at lane.after-claim: its first round
// took over a backlog of 8 aggregates (owner rows with its lease) and
// leased their rows, and published nothing. A fresh process takes each of
// them over only when the dead relay's lease (12 s) ran out and publishes
// the rows once, in order, while the aggregates the dead relay did not
// hold flow meanwhile.
//
// What breaks it: a claim that takes the dead relay's rows before their
// lease (next_attempt_at) and its owner row's ran out (published before
// lease_until); one that skips the dead relay's rows (later versions
// published first: the order check, or lost); a lease that never runs
// out (the wait times out). (A claim that takes over a live owner row
// whose rows are leased too is caught by TestLaneCompetingPollers: the
// first relay's marks are then refused and its rows published again.)
func TestLaneRelayKilledAfterClaim(t *testing.T) {
	t.Parallel()
	require.True(t, failpoint.Enabled, "failpoints need a build with -tags failpoints (make test sets it)")
	e := setup(t)
	l, _ := e.consume(t)
	ctx := context.Background()
	backlog := map[string]bool{}
	for i := range 40 {
		id, err := e.commit(ctx, aggID(i%8), false)
		require.NoError(t, err)
		backlog[id] = true
	}
	victim := e.startProcess(t, "run", laneEnv, "FERRY_FAILPOINTS=lane.after-claim=exit@1")
	victim.waitExit(t, time.Minute)
	killed := time.Now()
	require.Contains(t, victim.out.String(), "failpoint lane.after-claim: killing process", "died at the failpoint")
	dead := relayName(victim)
	type lease struct {
		epoch int64
		until time.Time
	}
	leases := map[string]lease{}
	rows, err := e.db.Pool.Query(ctx, `SELECT aggregate_id, epoch, lease_until FROM outbox_owners WHERE holder = $1`, dead)
	require.NoError(t, err)
	for rows.Next() {
		var agg string
		var ls lease
		require.NoError(t, rows.Scan(&agg, &ls.epoch, &ls.until))
		leases[agg] = ls
	}
	require.NoError(t, rows.Err())
	require.Len(t, leases, 8, "the dead relay owns the backlog's aggregates")
	claimed := e.pendingOwnedBy(t, dead)
	require.Equal(t, backlog, claimed, "the dead relay took the backlog's aggregates")

	replacement := e.startProcess(t, "run", laneEnv)
	load := e.startLaneLoad(t, 4, append(aggregateNames("agg", 8), aggregateNames("other", 4)...), 50*time.Millisecond)
	waitDelivered(t, l, claimed, time.Minute)
	took := time.Since(killed)
	time.Sleep(2 * time.Second)
	load.stop()
	all := eventIDs(load.events())
	maps.Copy(all, backlog)
	waitDelivered(t, l, all, 2*time.Minute)
	e.requireLaneEmpty(t, 30*time.Second)
	l.requireInOrder(t)
	acct := l.account()
	require.Zero(t, acct.duplicates, "the dead relay published nothing")

	laneRows := e.laneRows(t)
	byID := map[string]laneRow{}
	for _, r := range laneRows {
		byID[r.id] = r
	}
	var after []time.Duration // published this long after the dead relay's lease ended
	var lastLease time.Time
	for id := range claimed {
		r := byID[id]
		ls := leases[r.aggID]
		require.False(t, r.publishedAt.Before(ls.until), "%s v%d published at %s, before the dead relay's lease ended at %s",
			r.aggID, r.version, r.publishedAt.Format("15:04:05.000"), ls.until.Format("15:04:05.000"))
		require.Greater(t, r.epoch, ls.epoch, "%s v%d published under a newer epoch", r.aggID, r.version)
		require.Equal(t, relayName(replacement), r.claimedBy)
		after = append(after, r.publishedAt.Sub(ls.until))
		if ls.until.After(lastLease) {
			lastLease = ls.until
		}
	}
	slices.Sort(after)
	others := 0 // events of aggregates the dead relay did not hold, published during its leases
	for _, r := range laneRows {
		if _, held := leases[r.aggID]; !held && r.publishedAt.Before(lastLease) {
			others++
		}
	}
	t.Logf("killed after claiming %d rows of %d aggregates; they were published again %s after the kill, %s to %s after the dead relay's leases (12 s) ended; %d events of other aggregates published while the leases held; %d events, %d copies",
		len(claimed), len(leases), took.Round(100*time.Millisecond), after[0].Round(10*time.Millisecond), after[len(after)-1].Round(10*time.Millisecond),
		others, len(all), acct.copies)
	requireFenced(t, laneRows, true)
}

// Two and four `ferry poller` processes of the lane compete for 24
// aggregates under a steady load: every event arrives once, the first
// copies in each aggregate's order, no copy after a later version's, every
// poller publishes a share, and the rows show one owner at a time: along
// each aggregate's versions the epochs never go down, and each epoch was
// one relay's.
//
// What breaks it: a claim that ignores another relay's live lease (run
// with the lease checks taken out of sqlLaneClaim: 53 and 106
// duplicates, the first relay's marks refused); a claim of
// non-contiguous versions (a version skipped while another relay holds
// it: order, two relays' epochs interleaved along the versions); an owner
// row taken over without a new epoch.
func TestLaneCompetingPollers(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d pollers", n), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l, _ := e.consume(t)
			var relays []*child
			for range n {
				relays = append(relays, e.startProcess(t, "poller", laneEnv))
			}
			load := e.startLaneBursts(t, 4, aggregateNames("agg", 24), 20*time.Millisecond, 5)
			time.Sleep(8 * time.Second)
			load.stop()
			all := eventIDs(load.events())
			waitDelivered(t, l, all, 2*time.Minute)
			e.requireLaneEmpty(t, 30*time.Second)
			acct := l.account()
			l.requireInOrder(t)
			require.Zero(t, acct.duplicates, "no kill, no duplicate")
			require.Zero(t, acct.late, "no copy after a later version's: %v", acct.lateCopies)
			rows := e.laneRows(t)
			byRelay := requireFenced(t, rows, true)
			shares := make([]int, n)
			for i, c := range relays {
				shares[i] = byRelay[relayName(c)]
			}
			// switches: consecutive versions of an aggregate published by
			// two relays, the one taking over right after the other let go.
			switches := 0
			for i := 1; i < len(rows); i++ {
				if rows[i].aggID == rows[i-1].aggID && rows[i].claimedBy != rows[i-1].claimedBy {
					switches++
				}
			}
			epochs := e.count(t, `SELECT count(DISTINCT owner_epoch) FROM outbox_events`)
			t.Logf("%d pollers: %d events, rows marked per poller %v, %d ownerships (epochs), %d times an aggregate's next version went to another poller",
				n, len(all), shares, epochs, switches)
			for i, s := range shares {
				require.Positive(t, s, "poller %d published a share", i)
			}
		})
	}
}

// One `ferry run --source wal` and one `ferry run --source poll`, both of
// the lane, on one outbox (a private PostgreSQL with wal_level=logical):
// the log-tailing relay hands what it streams to its lane rounds, the
// poller claims the oldest; both publish, and every event arrives once and
// in order.
//
// What breaks it: a streamed aggregate published outside the ownership
// claim, or a claim that ignores a live lease (two relays publishing it:
// duplicates — 106 with the lease checks taken out of the claim — late
// copies, epochs going down); the stream's rows skipped by the poller's
// contiguity (lost).
func TestLanePollAndWALSourcesTogether(t *testing.T) {
	t.Parallel()
	e, _ := walEnv(t)
	l, _ := e.consume(t)
	wal := e.walProcess(t, "run", "wal", laneEnv)
	poll := e.startProcess(t, "run", laneEnv, "FERRY_SOURCE=poll")
	waitFor(t, time.Minute, "the replication slot streaming", func() bool {
		return e.count(t, `SELECT count(*) FROM pg_replication_slots WHERE active`) == 1
	})
	load := e.startLaneBursts(t, 4, aggregateNames("agg", 24), 20*time.Millisecond, 5)
	time.Sleep(8 * time.Second)
	load.stop()
	all := eventIDs(load.events())
	waitDelivered(t, l, all, 2*time.Minute)
	e.requireLaneEmpty(t, 30*time.Second)
	acct := l.account()
	l.requireInOrder(t)
	require.Zero(t, acct.duplicates, "no kill, no duplicate")
	require.Zero(t, acct.late, "no copy after a later version's: %v", acct.lateCopies)
	byRelay := requireFenced(t, e.laneRows(t), true)
	t.Logf("poll and WAL: %d events; rows marked by the WAL relay %d, by the poller %d", len(all), byRelay[relayName(wal)], byRelay[relayName(poll)])
	require.Positive(t, byRelay[relayName(wal)], "the WAL relay published")
	require.Positive(t, byRelay[relayName(poll)], "the poller published")
}

// An aggregate goes to its workflow and back again and again while events
// for it keep coming: each cycle commits an event of a type nothing is
// bound to (the lane hands the aggregate to its workflow, Unroutable),
// then binds the type; the run publishes what it holds and releases the
// aggregate while a new version is committed every 30 ms, so versions
// arrive during every release (handed to the run, which then finds them
// and waits: Busy) and right after it (the lane's). Every event arrives
// once and in order, every run completes, and the aggregate is back in the
// lane at the end.
//
// What breaks it: a release that does not check what was handed to the
// run (run with sqlRelease's handed_version check taken out: a version
// handed to a run that released is stranded, and the second cycle never
// starts); a run that keeps publishing after its release (fenced: it
// would fail with LostOwnership); a lane claim of a workflow's aggregate
// (duplicates, order).
func TestLaneRunReleasesWhileEventsArrive(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	l, _ := e.consume(t)
	e.startFerry(t, ferryOpts{lane: poller.LanePublishFirst, policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 1000}}})
	ctx := context.Background()
	load := e.startLaneLoad(t, 1, []string{"A"}, 30*time.Millisecond)
	const cycles = 20
	cycled := map[string]bool{}
	began := time.Now()
	for i := range cycles {
		typ := fmt.Sprintf("p%d", i)
		id, err := e.commitType(ctx, "A", typ, false)
		require.NoError(t, err)
		cycled[id] = true
		waitFor(t, 30*time.Second, fmt.Sprintf("cycle %d: A handed to its workflow", i), func() bool {
			o, ok := e.laneOwner(t, "A")
			return ok && o.Owner == relaydb.OwnerWorkflow && o.Cause == poller.ClassUnroutable
		})
		e.br.Bind(t, e.aggType+"."+typ)
		waitFor(t, time.Minute, fmt.Sprintf("cycle %d: its event published and A back in the lane", i), func() bool {
			o, ok := e.laneOwner(t, "A")
			return (!ok || o.Owner == relaydb.OwnerRelay) &&
				e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'published'`, id) == 1
		})
	}
	perCycle := time.Since(began) / cycles
	load.stop()
	all := eventIDs(load.events())
	for id := range cycled {
		all[id] = true
	}
	waitDelivered(t, l, all, time.Minute)
	e.requireLaneEmpty(t, time.Minute)
	acct := l.account()
	l.requireInOrder(t)
	require.Zero(t, acct.duplicates)
	require.Zero(t, acct.late, "no copy after a later version's: %v", acct.lateCopies)
	requireFenced(t, e.laneRows(t), false)

	// The runs: all completed; how often a release found versions handed
	// to the run and not yet delivered (Busy) and waited, and how often a
	// run went on after it had released the aggregate (the lane handed it
	// over again before the run completed: a newer epoch).
	resp, err := tclient.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: namespace, Query: fmt.Sprintf("WorkflowId = '%s'", workflows.WorkflowID(e.aggType, "A")), PageSize: 1000,
	})
	require.NoError(t, err)
	busy, released, wentOn := 0, 0, 0
	for _, ex := range resp.Executions {
		// Visibility lags the run: ask the run itself (a run completes just
		// after its release, which emptied outbox_owners).
		waitFor(t, 30*time.Second, "run "+ex.GetExecution().GetRunId()+" completed", func() bool {
			d, err := tclient.DescribeWorkflowExecution(ctx, ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId())
			return err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
		})
		it := tclient.GetWorkflowHistory(ctx, ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		releases := map[int64]bool{} // scheduled event ids of the run's releases
		runReleased := 0
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(t, err)
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == workflows.ReleaseAggregateActivity {
				releases[ev.GetEventId()] = true
			}
			if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && releases[a.GetScheduledEventId()] {
				var res workflows.ReleaseResult
				require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(a.GetResult(), &res))
				if res.Busy {
					busy++
				} else {
					runReleased++
				}
			}
		}
		released += runReleased
		wentOn += max(0, runReleased-1)
	}
	byRun := e.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = 'changed'
		AND owner_epoch IN (SELECT owner_epoch FROM outbox_events WHERE event_type LIKE 'p%')`)
	t.Logf("%d cycles, %s each; %d events, %d of the load's published by the runs; %d runs, %d releases, %d of them after which the run went on; %d releases found versions handed and not yet delivered and waited",
		cycles, perCycle.Round(100*time.Millisecond), len(all), byRun, len(resp.Executions), released, wentOn, busy)
	require.Positive(t, busy, "releases raced new versions")
}
