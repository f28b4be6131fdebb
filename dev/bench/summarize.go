package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ferry-outbox/ferry/workflows"
)

// memoryGrowthLimit: draining is "bounded" when the peak RSS of the second
// half of the drain is at most this times the first half's. A process that
// held every drained event would double from the first half to the second.
const memoryGrowthLimit = 1.5

// summarize fills Workloads, Targets and Problems from Runs.
func (res *Results) summarize() {
	res.Workloads = nil
	for _, w := range res.Config.Workloads {
		if w == WorkloadCommit || w == WorkloadCeiling {
			continue
		}
		ws := WorkloadSummary{Name: w, What: shapeOf(w, res.Config.Scale).what}
		for _, v := range variants {
			var runs []RunResult
			for _, r := range res.Runs {
				if r.Workload == w && r.variant() == v {
					runs = append(runs, r)
				}
			}
			if len(runs) == 0 {
				continue
			}
			*ws.slot(v) = summarizeSystem(runs)
		}
		ws.ThroughputRatio, ws.P99Ratio = ratios(ws.Ferry, ws.Plain)
		ws.LaneThroughputRatio, ws.LaneP99Ratio = ratios(ws.Lane, ws.Plain)
		ws.WALThroughputRatio, ws.WALP99Ratio = ratios(ws.FerryWAL, ws.Ferry)
		res.Workloads = append(res.Workloads, ws)
	}
	res.Ceiling = res.summarizeCeiling()
	res.Problems = nil
	for _, c := range res.CeilingRuns {
		if c.Problem != "" {
			res.Problems = append(res.Problems, fmt.Sprintf("%s · %s · rep %d: %s", WorkloadCeiling, c.Variant, c.Rep, c.Problem))
		}
	}
	for _, r := range res.Runs {
		name := fmt.Sprintf("%s · %s · rep %d", r.Workload, r.variant(), r.Rep)
		v := r.Verdict
		if v.Lost > 0 {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: %s of %s events LOST (committed, never received)", name, count(v.Lost), count(r.Events)))
		}
		if v.OutOfOrder > 0 {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: %s events received OUT OF ORDER within their aggregate", name, count(v.OutOfOrder)))
		}
		if v.Unexpected > 0 {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: %s events received that were never committed", name, count(v.Unexpected)))
		}
		if r.Problem != "" {
			res.Problems = append(res.Problems, name+": "+r.Problem)
		}
	}
	res.Targets = res.targets()
}

// ratios are a / b of the throughputs and p99s; 0 when either is missing.
func ratios(a, b *SystemSummary) (throughput, p99 float64) {
	if a == nil || b == nil {
		return 0, 0
	}
	if b.Throughput > 0 {
		throughput = a.Throughput / b.Throughput
	}
	if b.Latency.P99 > 0 {
		p99 = float64(a.Latency.P99) / float64(b.Latency.P99)
	}
	return throughput, p99
}

// summarizePostgres fills the PostgreSQL figures per event: medians over
// the runs that have them.
func (s *SystemSummary) summarizePostgres(runs []RunResult) {
	per := func(f func(p *PostgresCost) (float64, bool)) (float64, bool) {
		var xs []float64
		for _, r := range runs {
			if r.Postgres == nil || r.allEvents() == 0 {
				continue
			}
			if x, ok := f(r.Postgres); ok {
				xs = append(xs, x/float64(r.allEvents()))
			}
		}
		return orZero(Median(xs)), len(xs) > 0
	}
	s.OutboxUpdatesPerEvent, s.postgres = per(func(p *PostgresCost) (float64, bool) { return float64(p.RowsUpdated), true })
	s.OutboxHOTUpdatesPerEvent, _ = per(func(p *PostgresCost) (float64, bool) { return float64(p.HOTUpdated), true })
	s.WALBytesPerEvent, _ = per(func(p *PostgresCost) (float64, bool) { return float64(p.WALBytes), true })
	s.PostgresCPUPer1k, s.postgresCPU = per(func(p *PostgresCost) (float64, bool) {
		if p.CPUSeconds == nil {
			return 0, false
		}
		return *p.CPUSeconds * 1000, true
	})
}

func summarizeSystem(runs []RunResult) *SystemSummary {
	s := &SystemSummary{Reps: len(runs)}
	med := func(f func(RunResult) float64) float64 {
		xs := make([]float64, 0, len(runs))
		for _, r := range runs {
			xs = append(xs, f(r))
		}
		if m := Median(xs); !math.IsNaN(m) {
			return m
		}
		return 0 // not measured in any rep; JSON has no NaN
	}
	medD := func(f func(RunResult) time.Duration) time.Duration {
		ds := make([]time.Duration, 0, len(runs))
		for _, r := range runs {
			ds = append(ds, f(r))
		}
		return medianDuration(ds)
	}
	s.Events = int(med(func(r RunResult) float64 { return float64(r.Events) }))
	s.Throughput = med(func(r RunResult) float64 { return r.Throughput })
	if !runs[0].backlog() {
		s.ProducerRate = med(func(r RunResult) float64 {
			if r.ProduceSeconds <= 0 {
				return 0 // one transaction: no rate to speak of
			}
			return float64(r.Events) / r.ProduceSeconds
		})
	}
	s.Latency = Latency{
		P50: medD(func(r RunResult) time.Duration { return r.Latency.P50 }),
		P95: medD(func(r RunResult) time.Duration { return r.Latency.P95 }),
		P99: medD(func(r RunResult) time.Duration { return r.Latency.P99 }),
		Max: medD(func(r RunResult) time.Duration { return r.Latency.Max }),
		N:   s.Events,
	}
	if runs[0].Warm != nil {
		warm := func(f func(Latency) time.Duration) time.Duration {
			return medD(func(r RunResult) time.Duration {
				if r.Warm == nil {
					return 0
				}
				return f(*r.Warm)
			})
		}
		s.Warm = &Latency{
			P50: warm(func(l Latency) time.Duration { return l.P50 }),
			P95: warm(func(l Latency) time.Duration { return l.P95 }),
			P99: warm(func(l Latency) time.Duration { return l.P99 }),
			Max: warm(func(l Latency) time.Duration { return l.Max }),
			N: int(med(func(r RunResult) float64 {
				if r.Warm == nil {
					return 0
				}
				return float64(r.Warm.N)
			})),
		}
	}
	s.RelayCPUPer1k = med(func(r RunResult) float64 { return r.Relay.CPUPer1k })
	for _, r := range runs {
		s.RelayPeakMiB = max(s.RelayPeakMiB, r.Relay.PeakMiB)
		s.Lost += r.Verdict.Lost
		s.Duplicates += r.Verdict.Duplicates
		s.OutOfOrder += r.Verdict.OutOfOrder
		s.Unexpected += r.Verdict.Unexpected
		if r.Temporal != nil {
			s.TemporalPeakMiB = max(s.TemporalPeakMiB, r.Temporal.PeakMiB)
		}
		if len(r.Memory) > 0 {
			rg, tg := memoryGrowth(r.Memory, r.Events)
			s.MemoryGrowth = max(s.MemoryGrowth, rg)
			s.TemporalMemoryGrowth = max(s.TemporalMemoryGrowth, tg)
		}
		if r.History != nil && r.History.Sampled < r.History.Aggregates {
			s.HistorySampled = true
		}
	}
	if runs[0].Temporal != nil {
		s.TemporalCPUPer1k = med(func(r RunResult) float64 {
			if r.Temporal == nil {
				return 0
			}
			return r.Temporal.CPUPer1k
		})
	}
	perEvent := func(f func(*History) float64) float64 {
		return med(func(r RunResult) float64 {
			if r.History == nil || r.allEvents() == 0 {
				return math.NaN()
			}
			return f(r.History) / float64(r.allEvents())
		})
	}
	if runs[0].History != nil {
		s.history = true
		s.HistoryPerEvent = perEvent(func(h *History) float64 { return h.Events })
		s.WorkflowTasksPerEvent = perEvent(func(h *History) float64 { return h.WorkflowTasks })
		s.ActivitiesPerEvent = perEvent(func(h *History) float64 { return h.Activities })
		s.LocalActivitiesPerEvent = perEvent(func(h *History) float64 { return h.LocalActivities })
		s.SignalsPerEvent = perEvent(func(h *History) float64 { return h.Signals })
		s.OpenWorkflows = med(func(r RunResult) float64 {
			if r.History == nil || r.History.Runs == 0 {
				return math.NaN()
			}
			return r.History.Open / r.History.Runs
		})
	}
	costs := make([]*ServerCost, len(runs))
	events := make([]int, len(runs))
	for i, r := range runs {
		costs[i], events[i] = r.Server, r.allEvents()
	}
	s.ServerPerEvent, s.ServerTotals = summarizeCost(costs, events)
	s.summarizePostgres(runs)
	for _, r := range runs {
		if r.Lane != nil {
			if s.Lane == nil {
				s.Lane = &LaneCounts{}
			}
			s.Lane.add(*r.Lane)
		}
	}
	s.Probe = summarizeProbe(runs)
	return s
}

// memoryGrowth compares the peak RSS of the second half of a drain (by
// events received) with the first half's, for the relay and Temporal. 0
// when either half has no sample.
func memoryGrowth(points []memPoint, events int) (relay, temporal float64) {
	var r1, r2, t1, t2 float64
	for _, p := range points {
		if p.Received < events/2 {
			r1, t1 = max(r1, p.RelayMiB), max(t1, p.TemporalMiB)
		} else {
			r2, t2 = max(r2, p.RelayMiB), max(t2, p.TemporalMiB)
		}
	}
	if r1 > 0 && r2 > 0 {
		relay = r2 / r1
	}
	if t1 > 0 && t2 > 0 {
		temporal = t2 / t1
	}
	return relay, temporal
}

func (res *Results) workload(name string) *WorkloadSummary {
	for i := range res.Workloads {
		if res.Workloads[i].Name == name {
			return &res.Workloads[i]
		}
	}
	return nil
}

// targets checks the goals against the medians.
func (res *Results) targets() []Target {
	var out []Target
	status := func(ok bool) string {
		if ok {
			return Pass
		}
		return Miss
	}
	ratio := func(w string, min float64) Target {
		t := Target{Goal: fmt.Sprintf("%s: Ferry ≥ %g× the plain relay's events/s", w, min), Status: NotRun, Got: "needs both systems on " + w}
		if ws := res.workload(w); ws != nil && ws.Ferry != nil && ws.Plain != nil {
			t.Got = fmt.Sprintf("%.2f× (%s vs %s events/s)", ws.ThroughputRatio, count(int(ws.Ferry.Throughput)), count(int(ws.Plain.Throughput)))
			t.Status = status(ws.ThroughputRatio >= min)
		}
		return t
	}
	out = append(out, ratio(WorkloadBurst, 0.5), ratio(WorkloadOnePerAgg, 0.25), ratio(WorkloadBacklog, 0.2))

	t := Target{Goal: "steady-100: Ferry p99 commit → receipt ≤ 250ms over the whole run", Status: NotRun, Got: "needs Ferry on steady-100"}
	if ws := res.workload(WorkloadSteady100); ws != nil && ws.Ferry != nil {
		t.Got = "p99 " + dur(ws.Ferry.Latency.P99)
		if wl := ws.Ferry.Warm; wl != nil {
			t.Got += fmt.Sprintf(" (after the first %s: p99 %s)", WarmUp, dur(wl.P99))
		}
		t.Status = status(ws.Ferry.Latency.P99 > 0 && ws.Ferry.Latency.P99 <= 250*time.Millisecond)
	}
	out = append(out, t)

	out = append(out,
		res.costTarget(WorkloadOnePerAgg, "≤ 2 state transitions and ≤ 2 billed actions per event (a one-event aggregate)",
			func(p *CostPerUnit) bool { return p.StateTransitions <= 2 && p.Actions <= 2 },
			func(p *CostPerUnit) string {
				return fmt.Sprintf("%.2f state transitions, %.2f billed actions", p.StateTransitions, p.Actions)
			}),
		res.costTarget(WorkloadBurst, "≤ 0.2 state transitions per event",
			func(p *CostPerUnit) bool { return p.StateTransitions <= 0.2 },
			func(p *CostPerUnit) string { return fmt.Sprintf("%.2f", p.StateTransitions) }),
		res.ceilingTarget(0.8))

	t = Target{Goal: "commit: the outbox insert costs ≤ 15% of the producer's commit rate (NOTIFY on, as shipped)", Status: NotRun, Got: "needs the commit workload"}
	if c := res.Commit; c != nil {
		t.Got = fmt.Sprintf("%.0f%% (%s → %s commits/s; %.0f%% with NOTIFY off)", 100*c.OutboxCost, count(int(c.BusinessOnly)), count(int(c.WithOutbox)), 100*c.OutboxCostNoNotify)
		if c.WithPlainRow > 0 {
			t.Got += fmt.Sprintf("; a plain second row costs %.0f%%", 100*c.PlainRowCost)
		}
		t.Status = status(c.OutboxCost <= 0.15)
	}
	out = append(out, t)

	t = Target{Goal: fmt.Sprintf("backlog: memory bounded while draining (peak RSS of the 2nd half ≤ %g× the 1st half, ferry and Temporal)", memoryGrowthLimit),
		Status: NotRun, Got: "needs Ferry on backlog"}
	if ws := res.workload(WorkloadBacklog); ws != nil && ws.Ferry != nil && ws.Ferry.MemoryGrowth > 0 {
		t.Got = fmt.Sprintf("ferry ×%.2f (peak %.0f MiB), Temporal ×%.2f (peak %.0f MiB)", ws.Ferry.MemoryGrowth, ws.Ferry.RelayPeakMiB, ws.Ferry.TemporalMemoryGrowth, ws.Ferry.TemporalPeakMiB)
		t.Status = status(ws.Ferry.MemoryGrowth <= memoryGrowthLimit && ws.Ferry.TemporalMemoryGrowth <= memoryGrowthLimit)
	}
	out = append(out, t)
	for i := range out {
		out[i].System = SystemFerry
	}
	return append(out, res.laneTargets()...)
}

// Targets of the publish-first lane (issue 24), from the same run's
// medians.
const (
	laneMinRatio = 0.8
	laneMaxP99   = 100 * time.Millisecond
)

// laneTargets checks the publish-first lane's goals, and the workflow
// lane's figures against the baseline.
func (res *Results) laneTargets() []Target {
	var out []Target
	for _, w := range []string{WorkloadBurst, WorkloadOnePerAgg, WorkloadBacklog} {
		t := Target{Goal: fmt.Sprintf("%s: publish-first ≥ %g× the plain relay's events/s", w, laneMinRatio), Status: NotRun, Got: "needs publish-first and plain on " + w}
		if ws := res.workload(w); ws != nil && ws.Lane != nil && ws.Plain != nil {
			t.Got = fmt.Sprintf("%.2f× (%s vs %s events/s)", ws.LaneThroughputRatio, count(int(ws.Lane.Throughput)), count(int(ws.Plain.Throughput)))
			t.Status = passFail(ws.LaneThroughputRatio >= laneMinRatio)
		}
		out = append(out, t)
	}
	for _, w := range []string{WorkloadSteady100, WorkloadSteady500, WorkloadSteadyAfterBurst} {
		t := Target{Goal: fmt.Sprintf("%s: publish-first p99 commit → receipt ≤ %s over the whole run", w, dur(laneMaxP99)), Status: NotRun, Got: "needs publish-first on " + w}
		if ws := res.workload(w); ws != nil && ws.Lane != nil {
			t.Got = fmt.Sprintf("p99 %s, %s events/s delivered", dur(ws.Lane.Latency.P99), count(int(math.Round(ws.Lane.Throughput))))
			if wl := ws.Lane.Warm; wl != nil {
				t.Got += fmt.Sprintf(" (after the first %s: p99 %s)", WarmUp, dur(wl.P99))
			}
			t.Status = passFail(ws.Lane.Latency.P99 > 0 && ws.Lane.Latency.P99 <= laneMaxP99)
		}
		out = append(out, t)
	}
	out = append(out, res.zeroCostTarget(), res.probeTarget(), res.baselineTarget())
	for i := range out {
		out[i].System = SystemLane
	}
	out[len(out)-1].System = SystemFerry
	return out
}

// zeroCostTarget: the server counts nothing for events the lane published
// itself. It sums the server's counts over the publish-first runs whose
// every event the relay published (no handoff: no destination, no probe,
// no failure), so that a workflow's cost is never divided by other events.
func (res *Results) zeroCostTarget() Target {
	t := Target{Goal: "publish-first: 0 state transitions and 0 billed actions per event published directly at its first attempt (runs without a handoff)",
		Status: NotRun, Got: "needs publish-first on a workload without a destination, and the server's metrics"}
	var runs, left, events, direct, first int
	var transitions, actions float64
	var names []string
	for _, r := range res.Runs {
		if r.System != SystemLane || r.Server == nil || r.Lane == nil {
			continue
		}
		if r.Lane.handoffs() > 0 || r.Lane.ViaWorkflow > 0 || r.Probe != nil {
			left++
			continue
		}
		runs++
		events += r.allEvents()
		direct += r.Lane.Direct
		first += r.Lane.FirstAttempt
		transitions += r.Server.StateTransitions
		actions += r.Server.Actions
		if !slices.Contains(names, r.Workload) {
			names = append(names, r.Workload)
		}
	}
	if runs == 0 {
		return t
	}
	t.Got = fmt.Sprintf("%s state transitions, %s billed actions over %s events in %d runs (%s): %s published directly, %s at their first attempt",
		count(int(transitions)), count(int(actions)), count(events), runs, strings.Join(names, ", "), count(direct), count(first))
	if left > 0 {
		t.Got += fmt.Sprintf("; %d runs with a handoff (a destination, the probe, a failure) left out", left)
	}
	// Every event published directly (more: a direct publish repeated
	// after a lost lease), and the server did nothing.
	t.Status = passFail(transitions == 0 && actions == 0 && direct >= events)
	return t
}

// probeTarget: the handoff probe's aggregate is listed with its retrying
// activity in time.
func (res *Results) probeTarget() Target {
	t := Target{Goal: fmt.Sprintf("%s: publish-first lists an aggregate whose publish fails (an unroutable event) in the Temporal UI with its retrying %s within %s of the commit",
		probeWorkload, workflows.PublishEventActivity, probeTarget), Status: NotRun, Got: "needs publish-first on " + probeWorkload}
	ws := res.workload(probeWorkload)
	if ws == nil || ws.Lane == nil || ws.Lane.Probe == nil {
		return t
	}
	p := ws.Lane.Probe
	seen := func(d time.Duration) string {
		if d == 0 {
			return "not seen"
		}
		return dur(d)
	}
	t.Got = fmt.Sprintf("listed after %s (handed over after %s, the activity's second attempt after %s), median of %d",
		seen(p.Listed), seen(p.Handed), seen(p.Retrying), p.Reps)
	if len(p.Problems) > 0 {
		t.Got += "; " + strings.Join(p.Problems, "; ")
	}
	t.Status = passFail(p.Listed > 0 && p.Listed <= probeTarget)
	return t
}

// Baseline comparison: the workflow lane's ratio to the plain relay may
// fall to this share of the baseline's, and its server counts per event
// rise by this much, before the target misses (medians of a shared,
// noisy machine).
const (
	baselineMinShare = 0.9
	baselineSlack    = 0.02
)

// baselineTarget holds the workflow lane's figures against an earlier
// run's (Config.Baseline): its ratio to the plain relay, which depends
// little on the machine's speed, and the server's counts per event, which
// do not depend on it.
func (res *Results) baselineTarget() Target {
	t := Target{Goal: fmt.Sprintf("ferry (workflow lane) no worse than the baseline: per workload, its events/s ratio to the plain relay ≥ %g× the baseline's, state transitions and billed actions per event ≤ the baseline's + %g",
		baselineMinShare, baselineSlack), Status: NotRun, Got: "needs -baseline, an earlier results.json"}
	b := res.baseline
	if b == nil {
		return t
	}
	ok := true
	var got []string
	for _, ws := range res.Workloads {
		bw := b.workload(ws.Name)
		if bw == nil || ws.Ferry == nil || bw.Ferry == nil {
			continue
		}
		var parts []string
		if ws.ThroughputRatio > 0 && bw.ThroughputRatio > 0 {
			parts = append(parts, fmt.Sprintf("%.2f× vs %.2f×", ws.ThroughputRatio, bw.ThroughputRatio))
			ok = ok && ws.ThroughputRatio >= baselineMinShare*bw.ThroughputRatio
		}
		if p, q := ws.Ferry.ServerPerEvent, bw.Ferry.ServerPerEvent; p != nil && q != nil {
			parts = append(parts, fmt.Sprintf("%.2f / %.2f vs %.2f / %.2f transitions / actions per event", p.StateTransitions, p.Actions, q.StateTransitions, q.Actions))
			ok = ok && p.StateTransitions <= q.StateTransitions+baselineSlack && p.Actions <= q.Actions+baselineSlack
		}
		if len(parts) > 0 {
			got = append(got, ws.Name+" "+strings.Join(parts, ", "))
		}
	}
	if len(got) == 0 {
		t.Got = "no workload has the workflow lane's figures in both this run and the baseline"
		return t
	}
	t.Got = strings.Join(got, "; ")
	if b.Config.Scale != res.Config.Scale {
		t.Got += fmt.Sprintf(" (the baseline ran at scale %g, this run at %g)", b.Config.Scale, res.Config.Scale)
	}
	t.Status = passFail(ok)
	return t
}

// passFail is a checked target's status.
func passFail(ok bool) string {
	if ok {
		return Pass
	}
	return Miss
}
