package e2e

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/broker"
	fdelivery "github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/internal/testenv"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
)

// The publish-first lane when a relay's broker connection stalls (issue
// 24: "Confirm waits are bounded below the lease, so a publish can never
// outlive the ownership it was made under"): the relay's publisher dials
// RabbitMQ through a testenv.Proxy the test stalls.

// lanePoller is a poller of the lane in this process, publishing through
// its own publisher at amqpURL (a proxy, for the stall test), named name.
// Its log is kept and printed when the test fails.
func (e *env) lanePoller(t *testing.T, name, amqpURL string, lease time.Duration) *poller.Poller {
	t.Helper()
	pub, err := broker.New(broker.Config{URL: amqpURL, Exchange: e.br.Exchange, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	target, err := fdelivery.NewRabbitMQ(fdelivery.RabbitMQConfig{Publisher: pub})
	require.NoError(t, err)
	logs := &testenv.Buffer{}
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
// (here 20 s - MarkTimeout 5 s - broker.CloseWait 2 s = 13 s after the
// claim), is marked at once: the relay's connection stalls for 8 s after
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
	const lease = 20 * time.Second
	u, err := url.Parse(e.br.URL)
	require.NoError(t, err)
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	e.lanePoller(t, "slow", u.String(), lease)

	v1, err := e.commit(ctx, "A", false)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "v1 delivered through the proxy", func() bool { return l.unique() == 1 })
	proxy.Stall()
	v2, err := e.commit(ctx, "A", false)
	require.NoError(t, err)
	var own outbox.Owner
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
