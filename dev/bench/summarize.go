package bench

import (
	"fmt"
	"math"
	"time"
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
			if r.Postgres == nil || r.Events == 0 {
				continue
			}
			if x, ok := f(r.Postgres); ok {
				xs = append(xs, x/float64(r.Events))
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
			if r.History == nil || r.Events == 0 {
				return math.NaN()
			}
			return f(r.History) / float64(r.Events)
		})
	}
	if runs[0].History != nil {
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
		costs[i], events[i] = r.Server, r.Events
	}
	s.ServerPerEvent, s.ServerTotals = summarizeCost(costs, events)
	s.summarizePostgres(runs)
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
	return out
}
