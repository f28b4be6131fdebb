//go:build faults

package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The three faults of TestFaultTemporalCluster in turn, one every 5 s after
// the last has healed, for at least FERRY_FAULTS_DURATION (default 5m)
// under one steady load, accounted for by one checker at the end: history
// hosts SIGKILLed (the one owning most shards each time) and started again,
// the frontend process SIGKILLed and started again, and three rounds of
// terminating Temporal's PostgreSQL sessions.
func TestLongTemporalCluster(t *testing.T) {
	d := 5 * time.Minute
	if v := os.Getenv("FERRY_FAULTS_DURATION"); v != "" {
		var err error
		d, err = time.ParseDuration(v)
		require.NoError(t, err, "FERRY_FAULTS_DURATION")
	}
	cl := startTCluster(t, newTemporalPG(t, clusterShards), clusterHistories)
	requireClusterFormed(t, cl)
	faults := map[string]int{}
	began := time.Now()
	run := runClusterFault(t, cl, func(t *testing.T) int {
		n := 0
		for i := 0; time.Since(began) < d; i++ {
			switch i % 3 {
			case 0:
				killHistory(t, cl, 5*time.Second)
				faults["history host SIGKILLs"]++
			case 1:
				killFrontend(t, cl, 5*time.Second)
				faults["frontend SIGKILLs"]++
			case 2:
				for range 3 {
					faults["sessions terminated"] += terminateTemporalConns(t, cl)
					time.Sleep(time.Second)
				}
			}
			n++
			time.Sleep(5 * time.Second)
		}
		return n
	})
	t.Logf("%s of faults against the cluster: %v; %d events committed, longest stall between deliveries %s",
		time.Since(began).Round(time.Second), faults, run.r.Committed, run.stall.Round(10*time.Millisecond))
}
