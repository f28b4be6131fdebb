package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/workflows"
)

// The publish-first lane while the Temporal server is away (issue 24, "The
// lane keeps delivering while Temporal is away"): only the aggregates that
// fail in that time wait for it.

// committedBetween is the events committed in [from, to).
func committedBetween(events []committedEvent, from, to time.Time) []committedEvent {
	var out []committedEvent
	for _, c := range events {
		if !c.at.Before(from) && c.at.Before(to) {
			out = append(out, c)
		}
	}
	return out
}

// A `ferry run` of the lane under a steady load of 10 healthy aggregates;
// its Temporal server (one of this test's own, in a process of its own) is
// SIGKILLed for more than 30 s. The healthy aggregates' events keep
// arriving meanwhile, with the latency they had before. Events of a type
// nothing is bound to, committed during the outage, are handed to their
// workflows and wait: their rows stay pending, owned by the workflow, and
// nothing of them is published around the failure. Once Temporal is back
// they reach their workflows, which retry them visibly (a pending
// ferry.PublishEvent past its first attempt); once the route exists they
// are delivered and the aggregates return to the lane.
//
// What breaks it: a lane that needs Temporal for events that publish at
// once (deliveries stop, or wait for Temporal's return); a handoff that
// publishes around a failed start, or gives the aggregate back to the
// lane (the poison rows published, or not owned by the workflow); a
// failed handoff that is never retried (the runs never start); a round
// that waits for Temporal before it publishes the healthy aggregates
// (their latency during the outage).
func TestLaneDeliversWhileTemporalIsAway(t *testing.T) {
	t.Parallel()
	srv := startOwnTemporal(t)
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	l, _ := e.consume(t)
	ctx := context.Background()
	e.startProcess(t, "run", append(srv.env(), laneEnv, "FERRY_POLICY=*:max-attempts=1000")...)
	load := e.startLaneLoad(t, 2, aggregateNames("healthy", 10), 40*time.Millisecond)
	waitFor(t, time.Minute, "deliveries before the outage", func() bool { return l.unique() > 50 })
	baseline := time.Now()
	time.Sleep(6 * time.Second)

	stopped := time.Now()
	srv.kill()
	time.Sleep(8 * time.Second) // the outage without a failing aggregate
	poisoned := time.Now()
	poison := map[string]bool{}
	for i := range 3 {
		id, err := e.commitType(ctx, fmt.Sprintf("poison-%d", i), "poison", false)
		require.NoError(t, err)
		poison[id] = true
	}
	waitFor(t, 20*time.Second, "the poison aggregates handed to their workflows", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_owners WHERE aggregate_id LIKE 'poison-%' AND owner = 'workflow' AND cause = $1`,
			poller.ClassUnroutable) == 3
	})
	time.Sleep(time.Until(stopped.Add(32 * time.Second)))
	// The end of the outage: the poison rows wait, the workflow's, their
	// handoff tried again and again.
	pending := e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id LIKE 'poison-%' AND status = 'pending'`)
	owned := e.count(t, `SELECT count(*) FROM outbox_owners WHERE aggregate_id LIKE 'poison-%' AND owner = 'workflow'`)
	tries := e.count(t, `SELECT coalesce(min(attempts), 0) FROM outbox_events WHERE aggregate_id LIKE 'poison-%'`)
	var lastError string
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT coalesce(max(last_error), '') FROM outbox_events WHERE aggregate_id LIKE 'poison-%'`).Scan(&lastError))
	for id := range poison {
		l.mu.Lock()
		seen := l.seen[id]
		l.mu.Unlock()
		require.False(t, seen, "poison event %s published during the outage", id)
	}

	srv.start(t)
	back := time.Now()
	for i := range 3 {
		wid := workflows.WorkflowID(e.aggType, fmt.Sprintf("poison-%d", i))
		waitFor(t, 2*time.Minute, wid+" retrying its publish visibly", func() bool {
			d, err := srv.client.DescribeWorkflowExecution(ctx, wid, "")
			if err != nil {
				return false
			}
			for _, a := range d.GetPendingActivities() {
				if a.GetActivityType().GetName() == workflows.PublishEventActivity && a.GetAttempt() >= 2 {
					return true
				}
			}
			return false
		})
	}
	retrying := time.Since(back)
	time.Sleep(2 * time.Second)
	load.stop()
	events := load.events()
	waitDelivered(t, l, eventIDs(events), time.Minute)
	acct := l.account()

	before := latencies(committedBetween(events, baseline, stopped), acct.firstAt)
	quiet := latencies(committedBetween(events, stopped.Add(time.Second), poisoned), acct.firstAt)
	failing := latencies(committedBetween(events, poisoned, back), acct.firstAt)
	during := latencies(committedBetween(events, stopped.Add(time.Second), back), acct.firstAt)
	after := latencies(committedBetween(events, back, time.Now()), acct.firstAt)
	// Committed during the outage, more than SignalTimeout (5 s) before
	// its end, and delivered only after it: waited for Temporal.
	waitedOut := 0
	for _, c := range committedBetween(events, stopped, back.Add(-5*time.Second)) {
		if !acct.firstAt[c.id].Before(back) {
			waitedOut++
		}
	}
	pct := func(d []time.Duration) string {
		return fmt.Sprintf("%s/%s (%d events)", percentile(d, 50).Round(time.Millisecond), percentile(d, 99).Round(time.Millisecond), len(d))
	}
	t.Logf("Temporal away for %s (SIGKILL to frontend ready); healthy events' commit-to-delivery latency p50/p99: before %s; during the outage %s: in its first %s, before any aggregate failed, %s, after 3 aggregates failed %s; after it %s; %d committed during the outage delivered only after it",
		back.Sub(stopped).Round(100*time.Millisecond), pct(before), pct(during), poisoned.Sub(stopped).Round(time.Second), pct(quiet), pct(failing), pct(after), waitedOut)
	t.Logf("at the outage's end the 3 poison rows: %d pending, %d aggregates owned by their workflows, handed over at least %d times, last error %q; their runs retried them visibly %s after Temporal was back",
		pending, owned, tries, lastError, retrying.Round(100*time.Millisecond))

	require.GreaterOrEqual(t, back.Sub(stopped), 30*time.Second, "Temporal was away at least 30 s")
	require.Equal(t, 3, pending, "the poison rows waited")
	require.Equal(t, 3, owned, "owned by their workflows throughout")
	require.Zero(t, waitedOut, "healthy events kept arriving during the outage")
	require.NotEmpty(t, during)
	require.LessOrEqual(t, percentile(during, 99), max(time.Second, 3*percentile(before, 99)),
		"healthy events arrived during the outage with about their usual latency")

	e.br.Bind(t, e.aggType+".poison") // the fix downstream
	waitDelivered(t, l, poison, time.Minute)
	e.requireLaneEmpty(t, time.Minute)
	l.requireInOrder(t)
	acct = l.account()
	require.Zero(t, acct.duplicates)
	require.Zero(t, acct.late, "no copy after a later version's: %v", acct.lateCopies)
	requireFenced(t, e.laneRows(t), false)
}
