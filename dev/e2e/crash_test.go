package e2e

import (
	"context"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Ferry (poller and worker, one process) is SIGKILLed mid-stream and
// restarted. Every committed event is delivered, none from a rolled-back
// transaction, per-aggregate order holds, and business rows and events
// match one to one.
func TestKilledMidStreamLosesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	first := e.startChild(t)

	l, stopConsumer := e.consume(t)

	var (
		mu         sync.Mutex
		committed  = map[string]bool{}
		rolledBack = map[string]bool{}
	)
	produce := func(n int) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					rb := rand.IntN(5) == 0
					id, err := e.commit(ctx, aggID((w*n+i)%40), rb)
					if err != nil {
						t.Errorf("commit: %v", err)
						return
					}
					mu.Lock()
					if rb {
						rolledBack[id] = true
					} else {
						committed[id] = true
					}
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
	}

	produce(50)
	waitFor(t, 60*time.Second, "the first process to deliver something", func() bool { return l.unique() > 20 })
	go produce(50) // keeps committing while the process dies
	time.Sleep(300 * time.Millisecond)
	first.kill()
	t.Logf("killed ferry after %d unique deliveries", l.unique())
	time.Sleep(time.Second)
	e.startChild(t)
	produce(50)

	mu.Lock()
	want := len(committed)
	mu.Unlock()
	waitFor(t, 3*time.Minute, "every committed event delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return l.unique() >= len(committed)
	})
	stopConsumer()

	mu.Lock()
	defer mu.Unlock()
	want = len(committed)
	for id := range l.seen {
		require.False(t, rolledBack[id], "event %s of a rolled-back transaction was delivered", id)
		require.True(t, committed[id], "delivered event %s was never committed", id)
	}
	for id := range committed {
		require.True(t, l.seen[id], "committed event %s was lost", id)
	}
	require.Equal(t, want, l.unique())
	l.requireInOrder(t)

	orphans := e.count(t, `SELECT count(*) FROM orders o FULL JOIN outbox_events ev ON ev.id::text = o.id WHERE o.id IS NULL OR ev.id IS NULL`)
	require.Zero(t, orphans, "business rows without event or events without business row")
	require.Equal(t, want, e.count(t, `SELECT count(*) FROM orders`))
	t.Logf("committed %d, rolled back %d, delivered %d unique, %d duplicates (allowed after a crash)",
		want, len(rolledBack), l.unique(), l.duplicates)
}

// SIGTERM mid-stream: the process stops cleanly (exit 0, says so) within
// its stop budget, and a new process delivers whatever was left.
func TestGracefulStopMidStream(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := e.startChild(t)

	l, _ := e.consume(t)
	committed := e.commitN(t, 150, 15)
	waitFor(t, 60*time.Second, "some deliveries", func() bool { return l.unique() > 10 })

	require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM))
	start := time.Now()
	first.waitExit(t, 45*time.Second)
	require.NoError(t, first.err, "exit status after SIGTERM; output:\n%s", first.out.String())
	require.Contains(t, first.out.String(), "ferry: stopped")
	t.Logf("stopped %s after SIGTERM with %d of %d delivered", time.Since(start).Round(time.Millisecond), l.unique(), len(committed))

	e.startChild(t)
	waitFor(t, 2*time.Minute, "every committed event delivered after the restart", func() bool { return l.unique() == len(committed) })
	for id := range committed {
		require.True(t, l.seen[id], "committed event %s was lost", id)
	}
	l.requireInOrder(t)
}
