package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/destination"
)

func TestDestinationEnvIsARouteFerryAccepts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		workload string
		noBroker bool
	}{
		{WorkloadBurstStart, false},
		{WorkloadBurstStartNoBroker, true},
	} {
		// The aggregate type as runOne names it.
		aggType := fmt.Sprintf("r%d_%s_%s", 7, tt.workload, SystemFerry)
		env := destinationEnv(shapeOf(tt.workload, 0.1), aggType, 7)
		value, ok := strings.CutPrefix(env[0], "FERRY_DESTINATIONS=")
		require.True(t, ok, env)
		require.Equal(t, tt.noBroker, len(env) == 2 && env[1] == "FERRY_NO_BROKER=true", env)

		dests, err := destination.ParseAll([]string{value})
		require.NoError(t, err)
		router, err := destination.NewRouter(dests)
		require.NoError(t, err)
		routes, skipBroker := router.For(aggType, "bench") // the producer's event type
		require.Len(t, routes, 1)
		require.False(t, skipBroker, "--no-broker, not broker=false, takes RabbitMQ away")
		rt := routes[0]
		require.Equal(t, destination.Start, rt.Action)
		require.Equal(t, destWorkflowName, rt.WorkflowType)
		require.Equal(t, destQueue(7), rt.TaskQueue)
		id, err := rt.RenderID(destination.Envelope{EventID: "e-1"})
		require.NoError(t, err)
		require.Equal(t, "bench/e-1", id, "one workflow per event")
	}
	require.Nil(t, destinationEnv(shapeOf(WorkloadBurst, 1), "r1_burst_ferry", 1))
}

func TestAddMarksTakesRowsInMarkOrder(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	rows := []markedRow{
		// a: versions 1–3 marked by one statement (one time), listed out
		// of order, then 4 later.
		{id: "a3", aggID: "a", version: 3, at: at(10)},
		{id: "a4", aggID: "a", version: 4, at: at(20)},
		{id: "a1", aggID: "a", version: 1, at: at(10)},
		{id: "a2", aggID: "a", version: 2, at: at(10)},
		// b: version 2 marked before version 1.
		{id: "b2", aggID: "b", version: 2, at: at(5)},
		{id: "b1", aggID: "b", version: 1, at: at(15)},
	}
	tally := NewTally("r1_burst-start_ferry")
	addMarks(tally, "r1_burst-start_ferry", rows)
	committed := map[string]time.Time{"a1": at(0), "a2": at(0), "a3": at(0), "a4": at(0), "b1": at(0), "b2": at(0), "c1": at(0)}
	v, lat, last := tally.Check(committed)
	require.Equal(t, Verdict{Lost: 1, OutOfOrder: 2}, v, "c1 never marked; b2 before b1 (both first receipts out of turn)")
	require.Len(t, lat, 6)
	require.Equal(t, at(20), last)
	require.Equal(t, "a3", rows[0].id, "the caller's rows are left as they were")
}
