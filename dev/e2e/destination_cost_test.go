package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

// What each kind of workflow destination costs the Temporal engine per
// event, in state transitions and billed actions, read from a private
// server's metrics: one-event aggregates (eager one-shot runs, the
// cheapest path) with the destination's workflow doing nothing but take
// the event. The figures are the whole engine's: Ferry's aggregate run
// plus the destination's own workflow. Logged for docs/performance.md;
// the assertions only say each destination costs something, and at most
// what a start or signal and one workflow task can.
func TestWorkflowDestinationCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, metricsURL := costServer(t)
	c := costClient(t, srv)

	userTQ := ferrytest.Name("cost-user")
	uw := sdkworker.New(c, userTQ, sdkworker.Options{})
	uw.RegisterWorkflowWithOptions(func(workflow.Context, destination.Envelope) error { return nil }, workflow.RegisterOptions{Name: "CostDone"})
	uw.RegisterWorkflowWithOptions(recorderWorkflow, workflow.RegisterOptions{Name: "CostSink"})
	require.NoError(t, uw.Start())
	t.Cleanup(uw.Stop)

	type result struct{ st, actions float64 }
	measure := func(t *testing.T, name string, noBroker bool, routes func(aggType string) []string, prepare func(aggType string)) result {
		var e *env
		if noBroker {
			e = setupOn(t, ferrytest.NewDB(t, ""), nil)
		} else {
			e = setup(t)
		}
		e.startFerry(t, ferryOpts{shared: c, noBroker: noBroker, destinations: routes(e.aggType)})
		if prepare != nil {
			prepare(e.aggType)
		}
		published := func(n int) {
			waitFor(t, time.Minute, fmt.Sprintf("%d events published", n), func() bool {
				return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`) == n
			})
		}
		// Warm-up: the first workflow of each task queue pays for the queue.
		_, err := e.commitType(ctx, "warm-up", "created", false)
		require.NoError(t, err)
		published(1)
		waitClosed(t, c, workflows.WorkflowID(e.aggType, "warm-up"))
		time.Sleep(time.Second) // the destination's workflow task too

		const n = 20
		before := scrapeServer(t, metricsURL)
		for i := range n {
			_, err := e.commitType(ctx, aggID(i), "created", false)
			require.NoError(t, err)
		}
		published(n + 1)
		for i := range n {
			waitClosed(t, c, workflows.WorkflowID(e.aggType, aggID(i)))
		}
		time.Sleep(2 * time.Second) // the destinations' last workflow tasks
		moved := scrapeServer(t, metricsURL).since(before)
		r := result{moved.sum(metricTransitions, srv.Namespace()) / n, moved.sum(metricActions, srv.Namespace()) / n}
		t.Logf("%s: %.2f state transitions, %.2f actions per event (engine total)", name, r.st, r.actions)
		return r
	}

	base := measure(t, "broker only", false, func(string) []string { return nil }, nil)
	start := measure(t, "broker + start", false, func(a string) []string {
		return []string{fmt.Sprintf("%s.created=start:cost,type=CostDone,queue=%s", a, userTQ)}
	}, nil)
	startOnly := measure(t, "start, no broker", true, func(a string) []string {
		return []string{fmt.Sprintf("%s.created=start:cost,type=CostDone,queue=%s", a, userTQ)}
	}, nil)
	signal := measure(t, "broker + signal (one long-lived receiver)", false, func(a string) []string {
		return []string{fmt.Sprintf("%s.created=signal:cost,id=sink-%s,signal=paid", a, a)}
	}, func(a string) {
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "sink-" + a, TaskQueue: userTQ}, "CostSink", destination.Envelope{})
		require.NoError(t, err)
	})
	sws := measure(t, "broker + signal-with-start (a receiver per aggregate)", false, func(a string) []string {
		return []string{fmt.Sprintf("%s.created=signal-with-start:cost,type=CostSink,queue=%s,id=sws-{aggregate_id},signal=paid", a, userTQ)}
	}, nil)

	require.Positive(t, base.st, "the scrape saw no transitions")
	for name, r := range map[string]result{"start": start, "start only": startOnly, "signal": signal, "signal-with-start": sws} {
		require.Greater(t, r.st, base.st, "%s costs nothing: the figures cannot tell", name)
		require.Greater(t, r.actions, base.actions, name)
		require.LessOrEqual(t, r.st-base.st, 4.0, "%s: more than a start or signal and its workflow tasks", name)
	}
	require.InDelta(t, start.st, startOnly.st, 0.5, "the broker costs Temporal nothing")
}
