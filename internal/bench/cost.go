package bench

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"
)

// CostPerUnit is what the Temporal server did for one event.
type CostPerUnit struct {
	StateTransitions float64 `json:"state_transitions"`
	Actions          float64 `json:"billed_actions"`
	VisibilityWrites float64 `json:"visibility_writes"`
	RunsStarted      float64 `json:"runs_started"`
}

// summarizeCost takes the medians over reps of the server's counts, in all
// and per unit (units[i] events of rep i). Reps without a
// count are skipped; nil when none has one.
func summarizeCost(costs []*ServerCost, units []int) (*CostPerUnit, *ServerCost) {
	med := func(f func(c *ServerCost) float64) float64 {
		var xs []float64
		for _, c := range costs {
			if c != nil {
				xs = append(xs, f(c))
			}
		}
		return Median(xs)
	}
	per := func(f func(c *ServerCost) float64) float64 {
		var xs []float64
		for i, c := range costs {
			if c != nil && units[i] > 0 {
				xs = append(xs, f(c)/float64(units[i]))
			}
		}
		return orZero(Median(xs))
	}
	if math.IsNaN(med(func(c *ServerCost) float64 { return 0 })) {
		return nil, nil
	}
	totals := &ServerCost{
		Seconds:             med(func(c *ServerCost) float64 { return c.Seconds }),
		StateTransitions:    med(func(c *ServerCost) float64 { return c.StateTransitions }),
		Actions:             med(func(c *ServerCost) float64 { return c.Actions }),
		VisibilityWrites:    med(func(c *ServerCost) float64 { return c.VisibilityWrites }),
		RunsStarted:         med(func(c *ServerCost) float64 { return c.RunsStarted }),
		RunsCompleted:       med(func(c *ServerCost) float64 { return c.RunsCompleted }),
		EagerStarts:         med(func(c *ServerCost) float64 { return c.EagerStarts }),
		PersistenceRequests: med(func(c *ServerCost) float64 { return c.PersistenceRequests }),
		PersistenceMean:     time.Duration(med(func(c *ServerCost) float64 { return float64(c.PersistenceMean) })),
		PersistenceP99:      time.Duration(med(func(c *ServerCost) float64 { return float64(c.PersistenceP99) })),
	}
	return &CostPerUnit{
		StateTransitions: per(func(c *ServerCost) float64 { return c.StateTransitions }),
		Actions:          per(func(c *ServerCost) float64 { return c.Actions }),
		VisibilityWrites: per(func(c *ServerCost) float64 { return c.VisibilityWrites }),
		RunsStarted:      per(func(c *ServerCost) float64 { return c.RunsStarted }),
	}, totals
}

func orZero(x float64) float64 {
	if math.IsNaN(x) {
		return 0 // not measured; JSON has no NaN
	}
	return x
}

// writeServerCost prints the Temporal server's own counts for the Ferry
// runs: per event, then in all, so that a reader can divide.
func (res *Results) writeServerCost(w io.Writer) {
	var rows []WorkloadSummary
	for _, ws := range res.Workloads {
		if ws.Ferry != nil && ws.Ferry.ServerPerEvent != nil {
			rows = append(rows, ws)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTemporal's own count of its work per event (Ferry; the server's /metrics before the run and once it went idle after):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-12s\tstate transitions/ev\tbilled actions/ev\tvisibility writes/ev\truns started/ev\tpersistence mean\tpersistence p99\t\n", "workload")
	for _, ws := range rows {
		p, t := ws.Ferry.ServerPerEvent, ws.Ferry.ServerTotals
		fmt.Fprintf(tw, "%-12s\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t\n", ws.Name, p.StateTransitions, p.Actions, p.VisibilityWrites, p.RunsStarted,
			dur(t.PersistenceMean), dur(t.PersistenceP99))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nThe same in all (medians over the reps):\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-12s\tevents\tstate transitions\tbilled actions\tvisibility writes\truns started\truns completed\tstore requests\tseconds\t\n", "workload")
	for _, ws := range rows {
		t := ws.Ferry.ServerTotals
		fmt.Fprintf(tw, "%-12s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t\n", ws.Name, count(ws.Ferry.Events), count(int(t.StateTransitions)), count(int(t.Actions)),
			count(int(t.VisibilityWrites)), count(int(t.RunsStarted)), count(int(t.RunsCompleted)), count(int(t.PersistenceRequests)), t.Seconds)
	}
	tw.Flush()
	writeCostLegend(w)
}

// writeCostLegend says what each of the server's counts is, one line each.
func writeCostLegend(w io.Writer) {
	for _, line := range []string{
		"state transitions: mutable-state writes of workflow runs (observations of state_transition_count), what a history host's capacity is quoted in",
		"billed actions: Temporal Cloud's unit of price and of its actions/s limit (action, every type but the per-marker one: one workflow task's local activities are one action)",
		"visibility writes: visibility rows started, upserted or closed (visibility_persistence_requests of those operations)",
		"runs started: workflow runs created, continue-as-new included (writes of state_transition_count with a running count of 1)",
		"runs completed: runs that completed by the time the server went idle; open ones (idle until ferry's idle timeout) are not in any count",
		"persistence: latency of every store call of the server over the window (persistence_latency; p99 interpolated in its buckets)",
	} {
		fmt.Fprintf(w, "  %s\n", line)
	}
}

// costTarget checks a workload's server counts per event: goal follows
// the workload's name, ok says whether they meet it, got shows them.
func (res *Results) costTarget(workload, goal string, ok func(*CostPerUnit) bool, got func(*CostPerUnit) string) Target {
	t := Target{Goal: workload + ": " + goal, Status: NotRun, Got: "needs Ferry on " + workload + " and the server's metrics"}
	ws := res.workload(workload)
	if ws == nil || ws.Ferry == nil || ws.Ferry.ServerPerEvent == nil {
		return t
	}
	t.Got = got(ws.Ferry.ServerPerEvent)
	t.Status = Miss
	if ok(ws.Ferry.ServerPerEvent) {
		t.Status = Pass
	}
	return t
}
