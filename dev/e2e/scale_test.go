package e2e

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// commitConcurrently commits n events over the given number of aggregates
// from 4 goroutines at once, and returns their ids.
func (e *env) commitConcurrently(t *testing.T, n, aggregates, offset int) map[string]bool {
	t.Helper()
	var (
		mu  sync.Mutex
		ids = make(map[string]bool, n)
		wg  sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				id, err := e.commit(context.Background(), aggID((offset+i)%aggregates), false)
				if err != nil {
					t.Errorf("commit: %v", err)
					return
				}
				mu.Lock()
				ids[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ids
}

// Scale-out on one machine: two `ferry poller` and two `ferry worker`
// processes share one Temporal and one PostgreSQL. A burst is delivered
// completely and in order per aggregate; then one poller and one worker are
// SIGKILLed and a second burst is still delivered by the survivors.
func TestScaleOutPollersAndWorkers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	workers := []*child{e.startProcess(t, "worker"), e.startProcess(t, "worker")}
	pollers := []*child{e.startProcess(t, "poller"), e.startProcess(t, "poller")}
	l, stopConsumer := e.consume(t)

	const aggregates = 60
	start := time.Now()
	first := e.commitConcurrently(t, 600, aggregates, 0)
	committedIn := time.Since(start)
	waitFor(t, 2*time.Minute, "the first burst delivered", func() bool { return l.unique() >= len(first) })
	elapsed := time.Since(start)
	t.Logf("burst of %d events over %d aggregates: committed in %s, all delivered after %s (%.0f events/s end to end) by 2 pollers and 2 workers",
		len(first), aggregates, committedIn.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(len(first))/elapsed.Seconds())
	// Both pollers took part: claimed_by names the last claimer of each row.
	require.GreaterOrEqual(t, e.count(t, `SELECT count(DISTINCT claimed_by) FROM outbox_events`), 2, "both pollers claimed rows")

	// One of each dies mid-stream; the other of each carries on.
	second := make(chan map[string]bool, 1)
	go func() { second <- e.commitConcurrently(t, 300, aggregates, 600) }()
	waitFor(t, time.Minute, "the second burst under way", func() bool { return l.unique() >= len(first)+30 })
	require.NoError(t, pollers[0].cmd.Process.Signal(syscall.SIGKILL))
	require.NoError(t, workers[0].cmd.Process.Signal(syscall.SIGKILL))
	killedAt := time.Now()
	ids := <-second
	for id := range first {
		ids[id] = true
	}
	waitFor(t, 3*time.Minute, "every event delivered after the kills", func() bool { return l.unique() >= len(ids) })
	t.Logf("after killing a poller and a worker: the rest delivered %s after the kill", time.Since(killedAt).Round(time.Millisecond))
	waitFor(t, time.Minute, "every row marked published", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`) == len(ids)
	})
	stopConsumer()

	for id := range ids {
		require.True(t, l.seen[id], "committed event %s was lost", id)
	}
	require.Equal(t, len(ids), l.unique(), "nothing delivered that was not committed")
	l.requireInOrder(t)
	for i, c := range append(workers[1:], pollers[1:]...) {
		require.False(t, c.exited(), "survivor %d exited; output:\n%s", i, c.out.String())
	}
	t.Logf("%d events delivered in order per aggregate, %d duplicates (allowed after a kill)", len(ids), l.duplicates)
}
