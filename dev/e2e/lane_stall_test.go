package e2e

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/relaydb"
)

// The publish-first lane when a relay's broker connection stalls (issue
// 24: "Confirm waits are bounded below the lease, so a publish can never
// outlive the ownership it was made under"): the relay's publisher dials
// RabbitMQ through a servers.Proxy the test stalls.

// lanePoller is a poller of the lane in this process, publishing through
// its own publisher at amqpURL (a proxy, for the stall test), named name.
// Its log is kept and printed when the test fails.
func (e *env) lanePoller(t *testing.T, name, amqpURL string, lease time.Duration) *poller.Poller {
	t.Helper()
	pub, err := broker.New(broker.Config{URL: amqpURL, Exchange: e.br.Exchange, DialTimeout: 2 * time.Second, Heartbeat: poller.LaneHeartbeat(lease)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	target, err := rabbitmq.New(rabbitmq.Config{Publisher: pub})
	require.NoError(t, err)
	logs := &ferrytest.Buffer{}
	p, err := poller.New(poller.Config{
		Pool:          e.db.Pool,
		Temporal:      tclient,
		TaskQueue:     e.taskQueue,
		Name:          name,
		PollInterval:  200 * time.Millisecond,
		Lease:         lease,
		Lane:          poller.LanePublishFirst,
		Target:        target,
		NeedsWorkflow: func(string, string) bool { return false },
		Logger:        slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("log of poller %s:\n%s", name, logs.String())
		}
	})
	return p
}

// A confirm that comes late, but within the lease's budget for publishing
// (here, lease 60 s: 39 s after the claim, poller's publishBudget; the
// heartbeat is 6 s, and the client drops a connection silent for 1.5
// heartbeats, so an 8 s silence does not drop it), is marked at once: the relay's connection stalls for 8 s after
// it sent v2, longer than MarkTimeout, then the confirm arrives. The mark
// gets its own MarkTimeout after the publish.
//
// What breaks it: a mark deadline counted from the claim (as the lane had
// it): it ran out during the publish, nothing the broker confirmed was
// marked, and the rows went out again after the lease, for every round
// whose publishes took longer than MarkTimeout (a backlog of 40,000 events
// over 200 aggregates was never marked with the default 30 s lease).
func TestLaneSlowConfirmWithinTheLeaseIsMarked(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l, _ := e.consume(t)
	ctx := context.Background()
	const lease = 60 * time.Second
	u, err := url.Parse(e.br.URL)
	require.NoError(t, err)
	proxy := servers.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	e.lanePoller(t, "slow", u.String(), lease)

	v1, err := e.commit(ctx, "A", false)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "v1 delivered through the proxy", func() bool { return l.unique() == 1 })
	// The consumer can see v1 before the broker's confirm of it reaches the
	// relay (a persistent message is confirmed once it is on disk): a stall
	// begun then would hold v1's confirm, and the owner row read below would
	// be v1's claim, not v2's (the test then waited for v2 under v1's epoch).
	waitFor(t, 10*time.Second, "v1 marked and A given back", func() bool {
		_, owned := e.laneOwner(t, "A")
		return !owned && e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'published'`, v1) == 1
	})
	proxy.Stall()
	v2, err := e.commit(ctx, "A", false)
	require.NoError(t, err)
	var own relaydb.Owner
	waitFor(t, 20*time.Second, "the relay owning A, v2 on the wire", func() bool {
		o, ok := e.laneOwner(t, "A")
		own = o
		return ok && o.Holder == "slow" && proxy.Held() > 0
	})
	time.Sleep(time.Until(own.LeaseUntil.Add(-lease + 8*time.Second)))
	proxy.Unstall()
	unstalled := time.Now()
	waitFor(t, time.Until(own.LeaseUntil), "v2 marked published before the lease ends", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'published' AND owner_epoch = $2`, v2, own.Epoch) == 1
	})
	marked := time.Since(unstalled)
	_, owned := e.laneOwner(t, "A")
	require.False(t, owned, "the relay gave A back with the mark")
	waitDelivered(t, l, map[string]bool{v1: true, v2: true}, 10*time.Second)
	acct := l.account()
	t.Logf("confirm 8 s after the claim (lease %s): v2 marked %s after the stall ended, %s before the lease would have run out; %d copies",
		lease, marked.Round(10*time.Millisecond), time.Until(own.LeaseUntil).Round(100*time.Millisecond), acct.copies)
	require.Zero(t, acct.duplicates)
}

// A relay whose confirm wait would outlive its lease: its RabbitMQ
// connection (through a proxy) stalls, holding what it sent, for longer
// than the 12 s lease. The relay stops waiting before the lease ends
// (poller's publishBudget), marks nothing, and, since the broker answered
// neither the confirms nor the close, keeps the aggregate until its lease
// ends: what its connection held could still be routed until RabbitMQ
// drops the silent connection (about three heartbeats: the lane's
// publisher asks for a tenth of the lease, 1.2 s). Then another relay
// publishes the events, and when the stall ends no copy of the stalled
// relay arrives after the later versions the other one published.
//
// What breaks it: a confirm wait bounded only by the caller (the stalled
// relay would still wait when its lease ran out); a relay that marks an
// unconfirmed publish (v2 published under the stalled relay's epoch); a
// give-up before the lease that lets another relay publish while what was
// sent on the stalled connection can still reach a queue (a late copy:
// measured with the client's default 10 s heartbeat, a publish held 25 s
// was still routed); a heartbeat too long for the lease (the broker routes
// the held publish after the takeover).
func TestLaneConfirmWaitOutlivesLease(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l, _ := e.consume(t)
	ctx := context.Background()
	const lease = 12 * time.Second
	u, err := url.Parse(e.br.URL)
	require.NoError(t, err)
	proxy := servers.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	stalled := e.lanePoller(t, "stalled", u.String(), lease)

	v1, err := e.commit(ctx, "A", false)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "v1 delivered through the proxy", func() bool { return l.unique() == 1 })
	waitFor(t, 10*time.Second, "v1 marked", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'published'`, v1) == 1
	})

	proxy.Stall()
	stalledAt := time.Now()
	v2, err := e.commit(ctx, "A", false)
	require.NoError(t, err)
	var own relaydb.Owner
	waitFor(t, 20*time.Second, "the stalled relay owning A, v2 on the wire", func() bool {
		o, ok := e.laneOwner(t, "A")
		own = o
		return ok && o.Holder == "stalled" && proxy.Held() > 0
	})
	claimedAt := own.LeaseUntil.Add(-lease)
	e.lanePoller(t, "healthy", e.br.URL, lease)
	load := e.startLaneLoad(t, 1, []string{"A"}, 300*time.Millisecond) // v3, v4, … all along

	// One statement reads the owner row and v2's row together: the healthy
	// relay may publish v2 (clearing its error) right after the give-up.
	var v2Class string
	waitFor(t, lease+10*time.Second, "the stalled relay giving A up", func() bool {
		var owned bool
		require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_owners WHERE aggregate_id = 'A' AND epoch = $1),
			coalesce((SELECT last_error_class FROM outbox_events WHERE id = $2), '')`, own.Epoch, v2).Scan(&owned, &v2Class))
		return !owned
	})
	gaveUp := time.Now()
	// Out of the race for A from here: a relay whose broker stalls keeps
	// claiming aggregates after each pause and failing them, which only
	// delays the takeover this test is about.
	stalled.Stop()
	require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE owner_epoch = $1`, own.Epoch),
		"the stalled relay marked nothing under its epoch")
	waitFor(t, lease+20*time.Second, "v2 published by the healthy relay", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'published' AND claimed_by = 'healthy'`, v2) == 1
	})
	took := time.Now()
	// The stall lasts past the lease (and ends well before RabbitMQ's
	// heartbeat timeout would close the connection); then what it held
	// goes to the broker.
	time.Sleep(time.Until(own.LeaseUntil.Add(time.Second)))
	held := proxy.Held()
	proxy.Unstall()
	unstalledAt := time.Now()
	time.Sleep(3 * time.Second) // whatever was held is routed by now
	load.stop()
	all := eventIDs(load.events())
	all[v1], all[v2] = true, true
	waitDelivered(t, l, all, time.Minute)
	acct := l.account()
	t.Logf("stall of %s (lease %s, claimed %s after the stall began): the stalled relay gave A up %s after its claim (lease ends at %s), v2's row says %q; the healthy relay published v2 %s after the claim; %d bytes held at the end of the stall; %d events, %d copies, %d duplicates, %d late copies %v",
		unstalledAt.Sub(stalledAt).Round(100*time.Millisecond), lease, claimedAt.Sub(stalledAt).Round(100*time.Millisecond),
		gaveUp.Sub(claimedAt).Round(100*time.Millisecond), lease, v2Class, took.Sub(claimedAt).Round(100*time.Millisecond),
		held, len(all), acct.copies, acct.duplicates, acct.late, acct.lateCopies)
	require.False(t, gaveUp.Before(own.LeaseUntil), "the broker answered nothing: the stalled relay kept A until its lease ended")
	require.Empty(t, v2Class, "nothing was marked or backed off: v2 was left to the lease")
	l.requireInOrder(t)
	require.Zero(t, acct.late, "no copy after a later version's first copy: %v", acct.lateCopies)
	requireFenced(t, e.laneRows(t), true)
}
