package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// CostPerUnit is what the Temporal server did for one event, or for the
// ceiling one workflow.
type CostPerUnit struct {
	StateTransitions float64 `json:"state_transitions"`
	Actions          float64 `json:"billed_actions"`
	VisibilityWrites float64 `json:"visibility_writes"`
	RunsStarted      float64 `json:"runs_started"`
}

// summarizeCost takes the medians over reps of the server's counts, in all
// and per unit (units[i] events or workflows of rep i). Reps without a
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

// CeilingSummary is the engine's own rate: trivial workflows started and
// completed per second, per start variant, medians over the reps.
type CeilingSummary struct {
	Workflows int              `json:"workflows"`
	Starters  int              `json:"starters"`
	Variants  []CeilingVariant `json:"variants"`
	// FerryFraction is Ferry's one-per-agg events/s over the faster
	// variant's workflows/s: Ferry's poller signals-with-start an aggregate
	// it dispatched recently and starts a new one's run eagerly, so either
	// start can be the bound. 0 when either did not run.
	FerryFraction float64 `json:"ferry_one_per_agg_fraction_of_ceiling,omitempty"`
}

// CeilingVariant is one start variant of the ceiling.
type CeilingVariant struct {
	Variant          string       `json:"variant"`
	Reps             int          `json:"reps"`
	Rate             float64      `json:"workflows_per_second"`
	Samples          []float64    `json:"samples"`
	TemporalCPUPer1k float64      `json:"temporal_cpu_seconds_per_1000_workflows"`
	TemporalPeakMiB  float64      `json:"temporal_peak_mib"`
	PerWorkflow      *CostPerUnit `json:"server_per_workflow,omitempty"`
	Totals           *ServerCost  `json:"server_totals,omitempty"`
}

// summarizeCeiling is nil when the ceiling did not run.
func (res *Results) summarizeCeiling() *CeilingSummary {
	if len(res.CeilingRuns) == 0 {
		return nil
	}
	c := &CeilingSummary{Workflows: res.CeilingRuns[0].Workflows, Starters: ceilingStarters}
	for _, v := range ceilingVariants {
		cv := CeilingVariant{Variant: v}
		var cpu []float64
		var costs []*ServerCost
		var units []int
		for _, r := range res.CeilingRuns {
			if r.Variant != v {
				continue
			}
			cv.Reps++
			cv.Samples = append(cv.Samples, r.Rate)
			cpu = append(cpu, r.Temporal.CPUPer1k)
			cv.TemporalPeakMiB = max(cv.TemporalPeakMiB, r.Temporal.PeakMiB)
			costs, units = append(costs, r.Server), append(units, r.Completed)
		}
		if cv.Reps == 0 {
			continue
		}
		cv.Rate, cv.TemporalCPUPer1k = orZero(Median(cv.Samples)), orZero(Median(cpu))
		cv.PerWorkflow, cv.Totals = summarizeCost(costs, units)
		c.Variants = append(c.Variants, cv)
	}
	if best := c.best(); best != nil && best.Rate > 0 {
		if ws := res.workload(WorkloadOnePerAgg); ws != nil && ws.Ferry != nil {
			c.FerryFraction = ws.Ferry.Throughput / best.Rate
		}
	}
	return c
}

// best is the variant with the highest rate: the engine's ceiling.
func (c *CeilingSummary) best() *CeilingVariant {
	var b *CeilingVariant
	for i := range c.Variants {
		if b == nil || c.Variants[i].Rate > b.Rate {
			b = &c.Variants[i]
		}
	}
	return b
}

// writeServerCost prints the Temporal server's own counts for the Ferry
// runs: per event, then in all, so that a reader can divide.
func (res *Results) writeServerCost(w io.Writer) {
	// One row per workload and Ferry source that has the server's counts.
	var rows []ranSystem
	for _, ws := range res.Workloads {
		first := true
		for _, s := range ws.ran() {
			if s.ServerPerEvent == nil {
				continue
			}
			if first {
				s.label, first = ws.Name, false
			} else {
				s.label = ""
			}
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTemporal's own count of its work per event (both Ferry lanes; the server's /metrics before the run and once it went idle after):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-12s\t%-11s\tstate transitions/ev\tbilled actions/ev\tvisibility writes/ev\truns started/ev\tpersistence mean\tpersistence p99\t\n", "workload", "system")
	for _, s := range rows {
		p, t := s.ServerPerEvent, s.ServerTotals
		fmt.Fprintf(tw, "%-12s\t%-11s\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t\n", s.label, s.name, p.StateTransitions, p.Actions, p.VisibilityWrites, p.RunsStarted,
			dur(t.PersistenceMean), dur(t.PersistenceP99))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nThe same in all (medians over the reps):\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-12s\t%-11s\tevents\tstate transitions\tbilled actions\tvisibility writes\truns started\truns completed\tstore requests\tseconds\t\n", "workload", "system")
	for _, s := range rows {
		t := s.ServerTotals
		fmt.Fprintf(tw, "%-12s\t%-11s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t\n", s.label, s.name, count(s.Events), count(int(t.StateTransitions)), count(int(t.Actions)),
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

// writeCeiling prints the engine's own rate and cost.
func (res *Results) writeCeiling(w io.Writer) {
	c := res.Ceiling
	if c == nil || len(c.Variants) == 0 {
		return
	}
	fmt.Fprintf(w, "\nEngine ceiling: %s trivial workflows (no activities, complete at once) on a task queue of their own, %d starters, a worker in the bench:\n",
		count(c.Workflows), c.Starters)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-18s\tworkflows/s\tstate transitions/wf\tbilled actions/wf\tvisibility writes/wf\truns started/wf\teager\tpersistence mean\tpersistence p99\tCPU s/1k wf Temporal\t\n", "start")
	for _, v := range c.Variants {
		st, ac, vis, runs, eager, pm, pp := "–", "–", "–", "–", "–", "–", "–"
		if p, t := v.PerWorkflow, v.Totals; p != nil {
			st, ac, vis, runs = fmt.Sprintf("%.2f", p.StateTransitions), fmt.Sprintf("%.2f", p.Actions), fmt.Sprintf("%.2f", p.VisibilityWrites), fmt.Sprintf("%.2f", p.RunsStarted)
			pm, pp = dur(t.PersistenceMean), dur(t.PersistenceP99)
			if t.RunsStarted > 0 {
				eager = fmt.Sprintf("%.0f%%", 100*t.EagerStarts/t.RunsStarted)
			}
		}
		fmt.Fprintf(tw, "%-18s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t\n", v.Variant, count(int(math.Round(v.Rate))), st, ac, vis, runs, eager, pm, pp, v.TemporalCPUPer1k)
	}
	tw.Flush()
	fmt.Fprintf(w, "  workflows/s: first start → last completion; eager: the share of starts whose first workflow task came back in the start's response\n")
	if ws := res.workload(WorkloadOnePerAgg); ws != nil && ws.Ferry != nil {
		var shares []string
		for _, v := range c.Variants {
			if v.Rate > 0 {
				shares = append(shares, fmt.Sprintf("%.0f%% of the %s ceiling", 100*ws.Ferry.Throughput/v.Rate, v.Variant))
			}
		}
		fmt.Fprintf(w, "  Ferry's one-per-agg: %s events/s = %s\n", count(int(math.Round(ws.Ferry.Throughput))), strings.Join(shares, ", "))
	}
}

// ceilingTarget checks Ferry's one-per-agg rate against the engine's
// ceiling, its faster start variant.
func (res *Results) ceilingTarget(minShare float64) Target {
	t := Target{Goal: fmt.Sprintf("one-per-agg: Ferry ≥ %.0f%% of the engine's own ceiling (trivial workflows, the faster start)", 100*minShare),
		Status: NotRun, Got: "needs Ferry on one-per-agg and the ceiling workload"}
	ws := res.workload(WorkloadOnePerAgg)
	if res.Ceiling == nil || res.Ceiling.FerryFraction <= 0 || ws == nil || ws.Ferry == nil {
		return t
	}
	best := res.Ceiling.best()
	t.Got = fmt.Sprintf("%.0f%% (%s events/s vs %s workflows/s by %s", 100*res.Ceiling.FerryFraction, count(int(ws.Ferry.Throughput)), count(int(best.Rate)), best.Variant)
	for _, v := range res.Ceiling.Variants {
		if v.Variant != best.Variant {
			t.Got += fmt.Sprintf("; %s %s/s", v.Variant, count(int(v.Rate)))
		}
	}
	t.Got += ")"
	t.Status = Miss
	if res.Ceiling.FerryFraction >= minShare {
		t.Status = Pass
	}
	return t
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
