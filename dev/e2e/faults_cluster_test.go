package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Ferry on Temporal as a cluster of processes on PostgreSQL (tempCluster): a
// frontend process and two history processes sharing 8 shards, Ferry as two
// `ferry poller` and two `ferry worker` processes, the checker's consumer,
// and a fault that strikes Temporal under load. The long versions are in
// faults_cluster_long_test.go (build tag faults).

// clusterShards and clusterHistories size the test cluster: small, for a
// machine of two cores.
const clusterShards, clusterHistories = 8, 2

// requireClusterFormed waits until every process of cl is a member on
// record in PostgreSQL and the shards are spread over every history host.
// Every shard can be owned before the last history host has joined the
// ring: the first host takes them all, and hands some over a moment later
// (seen once in a CI run), so the spread is waited for, not checked once.
func requireClusterFormed(t *testing.T, cl *tempCluster) {
	t.Helper()
	// Roles: 1 frontend, 2 history, 3 matching, 4 worker.
	waitFor(t, 30*time.Second, "every member on record", func() bool {
		m := cl.members(t)
		return m[1] == 1 && m[2] == len(cl.history) && m[3] == 1 && m[4] == 1
	})
	var owners map[int32]string
	spread := func() bool {
		owners = cl.shardOwners(t)
		if len(owners) != clusterShards {
			return false
		}
		for _, h := range cl.history {
			if owned(owners, h) == 0 {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(time.Minute)
	for !spread() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 1m waiting for the %d shards to be owned by all %d history hosts; owners: %v", clusterShards, len(cl.history), owners)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterRun is what one fault run measured.
type clusterRun struct {
	r      report
	faults int           // kills, or terminated connections
	stall  time.Duration // the longest gap between two deliveries on the tap
}

// runClusterFault runs the checker's load through Ferry on cl while strike
// injects its fault, and checks. strike returns how many faults it made.
func runClusterFault(t *testing.T, cl *tempCluster, strike func(t *testing.T) int) clusterRun {
	t.Helper()
	e := setup(t)
	c := e.newChecker(t)
	c.useTemporal(cl.client, cl.frontend.namespace)
	for range 2 {
		e.startProcess(t, "poller", cl.env()...)
		e.startProcess(t, "worker", cl.env()...)
	}
	c.startConsumer(t)
	c.waitConsuming(t)
	stop := c.startLoad(load{aggregates: 24})
	waitFor(t, time.Minute, "deliveries before the fault", func() bool { return c.tap.unique() > 20 })
	n := strike(t)
	time.Sleep(3 * time.Second) // the load goes on after the fault
	stop()
	run := clusterRun{r: c.check(3 * time.Minute), faults: n, stall: c.tap.longestGap()}
	t.Logf("%d events committed, %d faults, %d lost; duplicates: %d signals recorded twice (dropped by the workflows), %d copies on the tap, %d redeliveries absorbed by the inbox; longest stall between deliveries %s; drained %s after the load",
		run.r.Committed, run.faults, run.r.Lost, run.r.DuplicateSignals, run.r.DuplicateCopies, run.r.Absorbed,
		run.stall.Round(10*time.Millisecond), run.r.Drained.Round(10*time.Millisecond))
	return run
}

// killHistory SIGKILLs the history host that owns the most shards, waits
// until the other hosts own them all, starts it again after down, and
// waits until it owns shards again.
func killHistory(t *testing.T, cl *tempCluster, down time.Duration) {
	t.Helper()
	owners := cl.shardOwners(t)
	victim := slices.MaxFunc(cl.history, func(a, b *ownTemporal) int { return owned(owners, a) - owned(owners, b) })
	had := owned(owners, victim)
	killed := time.Now()
	victim.kill()
	waitFor(t, 2*time.Minute, "the dead host's shards taken over", func() bool { return owned(cl.shardOwners(t), victim) == 0 })
	moved := time.Since(killed)
	time.Sleep(max(0, down-moved))
	victim.start(t)
	waitFor(t, 2*time.Minute, "shards back on the restarted host", func() bool { return owned(cl.shardOwners(t), victim) > 0 })
	t.Logf("history host %s (%d of %d shards) SIGKILLed: its shards moved to the other host within %s, it was started again after %s and owned %d shards %s after the kill",
		historyAddr(victim), had, clusterShards, moved.Round(100*time.Millisecond), max(down, moved).Round(100*time.Millisecond),
		owned(cl.shardOwners(t), victim), time.Since(killed).Round(100*time.Millisecond))
}

// killFrontend SIGKILLs the frontend process (frontend, matching, internal
// worker) and starts it again after down on the same ports.
func killFrontend(t *testing.T, cl *tempCluster, down time.Duration) {
	t.Helper()
	killed := time.Now()
	cl.frontend.kill()
	time.Sleep(down)
	cl.frontend.start(t)
	t.Logf("frontend process SIGKILLed and serving again %s later", time.Since(killed).Round(100*time.Millisecond))
}

// terminateTemporalConns terminates every PostgreSQL session on Temporal's
// two databases (and on no other) and returns how many.
func terminateTemporalConns(t *testing.T, cl *tempCluster) int {
	t.Helper()
	ctx := context.Background()
	var n int
	require.NoError(t, cl.pgAdmin(t).QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE datname = ANY($1) AND pid <> pg_backend_pid()`, []string{cl.pg.db, cl.pg.vis}).Scan(&n))
	return n
}

// The three faults against one cluster, one after another (the cluster's
// start is the expensive part), once it formed (every process a member on
// record, the shards spread over both history hosts): a history host SIGKILLed mid-burst and
// started again (its shards move to the other host and come back); the
// frontend process SIGKILLed and started again under steady load (signals
// in flight time out with an unknown outcome; the repeats the pollers send
// are dropped by the workflows); Temporal's PostgreSQL sessions terminated
// five times under load.
func TestFaultTemporalCluster(t *testing.T) {
	t.Parallel()
	cl := startTCluster(t, newTemporalPG(t, clusterShards), clusterHistories)
	requireClusterFormed(t, cl)
	t.Run("history host killed", func(t *testing.T) {
		runClusterFault(t, cl, func(t *testing.T) int { killHistory(t, cl, 5*time.Second); return 1 })
	})
	t.Run("frontend killed", func(t *testing.T) {
		runClusterFault(t, cl, func(t *testing.T) int { killFrontend(t, cl, 5*time.Second); return 1 })
	})
	t.Run("connections terminated", func(t *testing.T) {
		run := runClusterFault(t, cl, func(t *testing.T) int {
			var rounds []int
			for range 5 {
				time.Sleep(time.Second)
				rounds = append(rounds, terminateTemporalConns(t, cl))
			}
			t.Logf("sessions terminated per round: %v", rounds)
			total := 0
			for _, n := range rounds {
				total += n
			}
			require.Positive(t, total, "Temporal's sessions were terminated")
			return total
		})
		t.Logf("%d of Temporal's PostgreSQL sessions terminated in 5 rounds", run.faults)
	})
}
