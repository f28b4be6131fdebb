package poller

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
)

// A direct publish that takes longer than MarkTimeout (the broker's
// confirm held back 1.5 s by a stalled proxy in front of RabbitMQ; the
// mark timeout is 1 s) is still marked, once: the mark has MarkTimeout of
// its own once the publishes are over, and since they end by the claim
// plus Lease - MarkTimeout (the confirm wait's deadline, then the broker's
// close), the mark still ends inside the lease. When the mark's timeout
// ran from the claim, a slow publish used it up, the mark failed, and the
// rows came back after the lease to be published again: a backlog of
// 100,000 rows (claims of 20,000) was republished batch after batch and
// never drained (TestLongBacklog/publish-first).
func TestLaneMarksAPublishSlowerThanTheMarkTimeout(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	br := ferrytest.NewBroker(t, "")
	u, err := url.Parse(br.URL)
	require.NoError(t, err)
	proxy := servers.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	pub, err := broker.New(broker.Config{URL: u.String(), Exchange: br.Exchange, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	target, err := rabbitmq.New(rabbitmq.Config{Publisher: pub})
	require.NoError(t, err)
	p := newPoller(t, db.Pool, Config{Lane: LanePublishFirst, Target: target, MarkTimeout: time.Second})
	ctx := context.Background()

	first := insertEvent(t, db.Pool, "order", "A", nil)
	_, err = p.Drain(ctx) // the publisher's connection is up
	require.NoError(t, err)
	require.Equal(t, "published", readRow(t, db.Pool, first).Status)

	second := insertEvent(t, db.Pool, "order", "A", nil)
	proxy.Stall()
	unstall := time.AfterFunc(1500*time.Millisecond, proxy.Unstall)
	t.Cleanup(func() { unstall.Stop() })
	began := time.Now()
	_, err = p.Drain(ctx)
	took := time.Since(began)
	require.NoError(t, err)
	require.GreaterOrEqual(t, took, 1500*time.Millisecond, "the publish waited for the held confirm")
	require.Equal(t, "published", readRow(t, db.Pool, second).Status, "marked after a publish of %s", took.Round(time.Millisecond))
	var owners int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_owners`).Scan(&owners))
	require.Zero(t, owners, "the aggregate was given back")
	require.Len(t, br.Collect(t, 3, 2*time.Second), 2, "each version published once")
}

// The lane's claim does not write the rows it takes, so its mark counts
// the publish in attempts: a row published at its first attempt reads 1,
// as in the workflow lane, and a broker-wide failure (dialling RabbitMQ
// refused) counts as an attempt of the rows it sent back.
func TestLaneMarkCountsAttempts(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	br := ferrytest.NewBroker(t, "")
	u, err := url.Parse(br.URL)
	require.NoError(t, err)
	proxy := servers.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	pub, err := broker.New(broker.Config{URL: u.String(), Exchange: br.Exchange, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	target, err := rabbitmq.New(rabbitmq.Config{Publisher: pub})
	require.NoError(t, err)
	p := newPoller(t, db.Pool, Config{Lane: LanePublishFirst, Target: target})
	ctx := context.Background()

	first := insertEvent(t, db.Pool, "order", "A", nil)
	_, err = p.Drain(ctx)
	require.NoError(t, err)
	r := readRow(t, db.Pool, first)
	require.Equal(t, "published", r.Status)
	require.Equal(t, 1, r.Attempts, "published at its first attempt")

	proxy.Pause()
	second := insertEvent(t, db.Pool, "order", "A", nil)
	_, err = p.Drain(ctx)
	require.NoError(t, err)
	r = readRow(t, db.Pool, second)
	require.Equal(t, "pending", r.Status, "the broker was away")
	require.NotNil(t, r.LastError)
	require.Equal(t, 1, r.Attempts, "the failed publish counted: %s", *r.LastError)

	proxy.Resume()
	eventually(t, 30*time.Second, func() bool {
		_, err := p.Drain(ctx)
		require.NoError(t, err)
		return readRow(t, db.Pool, second).Status == "published"
	}, "the second event published once the broker is back")
	require.Equal(t, 2, readRow(t, db.Pool, second).Attempts)
	require.Len(t, br.Collect(t, 3, 2*time.Second), 2, "each version published once")
}
