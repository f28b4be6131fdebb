package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Results is everything one benchmark invocation measured; it is what
// results.json holds.
type Results struct {
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	Machine  Machine       `json:"machine"`
	Config   Config        `json:"config"`
	// Commit is the producer's commit rate, when the commit workload ran.
	Commit    *CommitSummary    `json:"commit,omitempty"`
	Workloads []WorkloadSummary `json:"workloads"`
	// Ceiling is the engine's own rate, when the ceiling workload ran.
	Ceiling *CeilingSummary `json:"ceiling,omitempty"`
	Targets []Target        `json:"targets"`
	// Problems are lost or disordered events and relays that died: any
	// makes the benchmark fail.
	Problems    []string     `json:"problems"`
	Runs        []RunResult  `json:"runs"`
	CeilingRuns []CeilingRun `json:"ceiling_runs,omitempty"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model"`
	MemoryMiB   int    `json:"memory_mib"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"go_version"`
	LoadAtStart string `json:"load_at_start"`
}

// RunResult is one workload run once on one system.
type RunResult struct {
	Workload string `json:"workload"`
	System   string `json:"system"`
	// Source is Ferry's relay source, poll or wal ("" for the plain relay).
	Source        string `json:"source,omitempty"`
	Rep           int    `json:"rep"`
	AggregateType string `json:"aggregate_type"`
	Events        int    `json:"events"`
	Transactions  int    `json:"transactions"`
	// ProduceSeconds: first to last commit.
	ProduceSeconds float64 `json:"produce_seconds"`
	// ElapsedSeconds: first commit (backlog: relay ready) to last receipt.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Throughput is events received / ElapsedSeconds.
	Throughput float64 `json:"events_per_second"`
	// Latency is commit → first receipt by the consumer.
	Latency Latency `json:"latency"`
	// Warm is Latency of the events committed after the first WarmUp of a
	// steady-rate run: the start, where every aggregate's workflow is
	// started at once, left out.
	Warm    *Latency `json:"latency_after_warm_up,omitempty"`
	Verdict Verdict  `json:"verdict"`
	// Relay is the process under test: `ferry run` or the plain relay.
	Relay ProcFigures `json:"relay"`
	// Temporal is the Temporal server process (Ferry runs only).
	Temporal *ProcFigures `json:"temporal,omitempty"`
	// Server is what the Temporal server counted of its own work (Ferry
	// runs only).
	Server  *ServerCost `json:"server,omitempty"`
	History *History    `json:"history,omitempty"`
	// Postgres is what PostgreSQL did during the run.
	Postgres *PostgresCost `json:"postgres,omitempty"`
	// Memory is sampled every 500 ms during a backlog drain.
	Memory  []memPoint `json:"memory,omitempty"`
	Problem string     `json:"problem,omitempty"`

	latencies []time.Duration
}

// Variants: a system with its source, as runs are grouped and shown.
const variantFerryWAL = "ferry-wal"

// variants in the order of the tables; Ferry with --source poll is
// SystemFerry, as before there were sources.
var variants = []string{SystemFerry, variantFerryWAL, SystemPlain}

// variantOf names a system with its source: "ferry" (source poll, or none
// in results of older benches), "ferry-wal", "plain".
func variantOf(system, source string) string {
	if system == SystemFerry && source == SourceWAL {
		return variantFerryWAL
	}
	return system
}

func (r RunResult) variant() string { return variantOf(r.System, r.Source) }

// ProcFigures is a process's cost over one run's measuring window.
type ProcFigures struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUPer1k   float64 `json:"cpu_seconds_per_1000_events"`
	// PeakMiB is VmHWM: since the process started (the relays, started
	// per run) or since the run started (Temporal, reset per run).
	PeakMiB float64 `json:"peak_mib"`
}

// CommitSummary is the producer's commit rate with Clients concurrent
// transactions, medians over the reps.
type CommitSummary struct {
	Clients            int     `json:"clients"`
	Seconds            float64 `json:"seconds_per_variant"`
	BusinessOnly       float64 `json:"business_only_per_second"`
	WithOutbox         float64 `json:"with_outbox_per_second"`
	WithOutboxNoNotify float64 `json:"with_outbox_no_notify_per_second"`
	OutboxCost         float64 `json:"outbox_cost"`
	OutboxCostNoNotify float64 `json:"outbox_cost_no_notify"`
	// WithPlainRow is the reference: a second plain row instead of the
	// outbox event, what any extra insert costs on this machine.
	WithPlainRow float64              `json:"with_plain_row_per_second"`
	PlainRowCost float64              `json:"plain_row_cost"`
	Samples      map[string][]float64 `json:"samples"`
}

// WorkloadSummary holds one workload's medians per system and the ratios.
type WorkloadSummary struct {
	Name string `json:"name"`
	What string `json:"what"`
	// Ferry is Ferry with --source poll (as shipped), FerryWAL with
	// --source wal.
	Ferry    *SystemSummary `json:"ferry,omitempty"`
	FerryWAL *SystemSummary `json:"ferry_wal,omitempty"`
	Plain    *SystemSummary `json:"plain,omitempty"`
	// ThroughputRatio and P99Ratio are Ferry (poll) / plain of the
	// medians; 0 when a system did not run.
	ThroughputRatio float64 `json:"throughput_ratio_ferry_over_plain,omitempty"`
	P99Ratio        float64 `json:"p99_ratio_ferry_over_plain,omitempty"`
	// WALThroughputRatio and WALP99Ratio are Ferry's wal / poll sources.
	WALThroughputRatio float64 `json:"throughput_ratio_wal_over_poll,omitempty"`
	WALP99Ratio        float64 `json:"p99_ratio_wal_over_poll,omitempty"`
}

// SystemSummary is one system on one workload: medians over its reps
// (peak memory: the highest; verdict counts: sums).
type SystemSummary struct {
	Reps       int     `json:"reps"`
	Events     int     `json:"events"`
	Throughput float64 `json:"events_per_second"`
	// ProducerRate is events / (first → last commit): the most any relay
	// could show on this workload (0 for the backlog).
	ProducerRate float64  `json:"producer_events_per_second,omitempty"`
	Latency      Latency  `json:"latency"`
	Warm         *Latency `json:"latency_after_warm_up,omitempty"`

	RelayCPUPer1k    float64 `json:"relay_cpu_seconds_per_1000_events"`
	RelayPeakMiB     float64 `json:"relay_peak_mib"`
	TemporalCPUPer1k float64 `json:"temporal_cpu_seconds_per_1000_events,omitempty"`
	TemporalPeakMiB  float64 `json:"temporal_peak_mib,omitempty"`

	HistoryPerEvent         float64 `json:"history_events_per_event,omitempty"`
	WorkflowTasksPerEvent   float64 `json:"workflow_tasks_per_event,omitempty"`
	ActivitiesPerEvent      float64 `json:"activities_per_event,omitempty"`
	LocalActivitiesPerEvent float64 `json:"local_activities_per_event,omitempty"`
	SignalsPerEvent         float64 `json:"signals_per_event,omitempty"`
	HistorySampled          bool    `json:"history_sampled,omitempty"`
	// OpenWorkflows: the share of aggregate workflow runs still open
	// (idle) when the histories were read, median over the reps.
	OpenWorkflows float64 `json:"open_workflow_share,omitempty"`

	// ServerPerEvent and ServerTotals are the Temporal server's own counts
	// (Ferry only), per event and in all, medians over the reps.
	ServerPerEvent *CostPerUnit `json:"server_per_event,omitempty"`
	ServerTotals   *ServerCost  `json:"server_totals,omitempty"`

	// PostgreSQL's work per event, medians over the reps (PostgresCost):
	// rows of outbox_events updated (HOT ones included, and also shown
	// alone), WAL bytes written by the cluster, and CPU seconds per 1,000
	// events of the cluster's processes (only on the bench's own cluster).
	OutboxUpdatesPerEvent    float64 `json:"outbox_rows_updated_per_event"`
	OutboxHOTUpdatesPerEvent float64 `json:"outbox_rows_hot_updated_per_event"`
	WALBytesPerEvent         float64 `json:"wal_bytes_per_event"`
	PostgresCPUPer1k         float64 `json:"postgres_cpu_seconds_per_1000_events,omitempty"`
	postgres, postgresCPU    bool

	// MemoryGrowth (backlog): the highest ratio over the reps of peak RSS
	// in the second half of the drain to the first half, for the relay
	// process and the Temporal server.
	MemoryGrowth         float64 `json:"memory_growth,omitempty"`
	TemporalMemoryGrowth float64 `json:"temporal_memory_growth,omitempty"`

	Lost       int `json:"lost"`
	Duplicates int `json:"duplicates"`
	OutOfOrder int `json:"out_of_order"`
	Unexpected int `json:"unexpected"`
}

// Target is one of the benchmark's goals checked against what was
// measured.
type Target struct {
	Goal   string `json:"goal"`
	Got    string `json:"got"`
	Status string `json:"status"` // PASS, MISS or NOT RUN
}

// Target statuses.
const (
	Pass   = "PASS"
	Miss   = "MISS"
	NotRun = "NOT RUN"
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

// WriteTable prints the results for people.
func (res *Results) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nFerry (bin/ferry run + embedded Temporal) vs. a plain relay (SKIP LOCKED → confirms → mark).\n")
	if res.Config.privateCluster() {
		fmt.Fprintf(w, "Ferry with each relay source: ferry-poll (--source poll, as shipped) and ferry-wal (--source wal, log tailing);\n"+
			"every system on a PostgreSQL cluster of the bench's own (wal_level=logical).\n")
	}
	fmt.Fprintf(w, "Medians of %d run(s) per workload and system; %d CPUs (%s), load %s at start; took %s.\n",
		res.Config.Reps, res.Machine.CPUs, res.Machine.CPUModel, res.Machine.LoadAtStart, clock(res.Duration.Round(time.Second)))

	if len(res.Workloads) > 0 {
		fmt.Fprintf(w, "\nThroughput and latency (commit → received by the consumer):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		bound := false
		fmt.Fprintf(tw, "%-12s\t%-11s\tevents\tevents/s\tp50\tp95\tp99\tmax\tlost\tdup\tdisorder\t\n", "workload", "system")
		for _, ws := range res.Workloads {
			for _, s := range ws.ran() {
				eps := count(int(math.Round(s.Throughput)))
				if s.producerBound() && !strings.HasPrefix(ws.Name, "steady") {
					eps = "‡" + eps
					bound = true
				}
				fmt.Fprintf(tw, "%-12s\t%-11s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t\n", s.label, s.name, count(s.Events), eps,
					dur(s.Latency.P50), dur(s.Latency.P95), dur(s.Latency.P99), dur(s.Latency.Max), s.Lost, s.Duplicates, s.OutOfOrder)
			}
			if ws.Ferry != nil && ws.Plain != nil {
				fmt.Fprintf(tw, "%-12s\t%-11s\t\t%.2f×\t\t\t%.1f×\t\t\t\t\t\n", "", ws.label(SystemFerry)+"/plain", ws.ThroughputRatio, ws.P99Ratio)
			}
			if ws.FerryWAL != nil && ws.Ferry != nil {
				fmt.Fprintf(tw, "%-12s\t%-11s\t\t%.2f×\t\t\t%.1f×\t\t\t\t\t\n", "", "wal/poll", ws.WALThroughputRatio, ws.WALP99Ratio)
			}
		}
		tw.Flush()
		if bound {
			fmt.Fprintf(w, "  ‡ the relay finished within 25%% of the producer's own time: this is the producer's rate, not the relay's limit\n")
		}
		for _, ws := range res.Workloads {
			for _, s := range ws.ran() {
				if s.Warm != nil {
					fmt.Fprintf(w, "  %s %s after the first %s (every aggregate's first event in it): p50 %s, p95 %s, p99 %s, max %s\n",
						ws.Name, s.name, WarmUp, dur(s.Warm.P50), dur(s.Warm.P95), dur(s.Warm.P99), dur(s.Warm.Max))
				}
			}
		}

		fmt.Fprintf(w, "\nCost per event (relay: the `ferry run` process, or the plain relay's; CPU over the run; peak RSS):\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		sampled := false
		fmt.Fprintf(tw, "%-12s\t%-11s\thistory ev/event\twf tasks/event\tCPU s/1k ev relay\tCPU s/1k ev Temporal\tpeak MiB relay\tpeak MiB Temporal\t\n", "workload", "system")
		for _, ws := range res.Workloads {
			for _, s := range ws.ran() {
				hist, wft := "–", "–"
				if s.HistoryPerEvent > 0 {
					hist, wft = fmt.Sprintf("%.2f", s.HistoryPerEvent), fmt.Sprintf("%.2f", s.WorkflowTasksPerEvent)
					if s.HistorySampled {
						sampled = true
						hist += "*"
						wft += "*"
					}
				}
				tcpu, tmem := "–", "–"
				if s.TemporalPeakMiB > 0 {
					tcpu, tmem = fmt.Sprintf("%.2f", s.TemporalCPUPer1k), fmt.Sprintf("%.0f", s.TemporalPeakMiB)
				}
				fmt.Fprintf(tw, "%-12s\t%-11s\t%s\t%s\t%.2f\t%s\t%.0f\t%s\t\n", s.label, s.name, hist, wft, s.RelayCPUPer1k, tcpu, s.RelayPeakMiB, tmem)
			}
		}
		tw.Flush()
		if sampled {
			fmt.Fprintf(w, "  * estimated from a uniform sample of %d aggregates per run (-history-sample)\n", res.Config.HistorySample)
		}
		fmt.Fprintf(w, "  History and the server's counts are read once the server went idle, at least %s after the last event arrived; the idle\n"+
			"  completion of aggregate workflows still open then (timer, one workflow task, completion: about 5 events per workflow run)\n"+
			"  is not in them. -settle 70s includes it.\n", res.Config.Settle)
		res.writeServerCost(w)
		res.writePostgres(w)
	}
	res.writeCeiling(w)

	if c := res.Commit; c != nil {
		fmt.Fprintf(w, "\nProducer commit rate, %d clients, %gs per variant:\n", c.Clients, c.Seconds)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%-48s\tcommits/s\tcost\t\n", "transaction")
		fmt.Fprintf(tw, "%-48s\t%s\t\t\n", commitBusiness, count(int(c.BusinessOnly)))
		fmt.Fprintf(tw, "%-48s\t%s\t%.0f%%\t\n", commitOutbox, count(int(c.WithOutbox)), 100*c.OutboxCost)
		fmt.Fprintf(tw, "%-48s\t%s\t%.0f%%\t\n", commitNoNotify, count(int(c.WithOutboxNoNotify)), 100*c.OutboxCostNoNotify)
		if c.WithPlainRow > 0 {
			fmt.Fprintf(tw, "%-48s\t%s\t%.0f%%\t\n", commitPlainRow, count(int(c.WithPlainRow)), 100*c.PlainRowCost)
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\nTargets:\n")
	for _, t := range res.Targets {
		fmt.Fprintf(w, "  %-7s  %s\n           got %s\n", t.Status, t.Goal, t.Got)
	}
	fmt.Fprintln(w)
	if len(res.Problems) == 0 {
		fmt.Fprintln(w, "Delivery checked: every committed event was received, in order within its aggregate.")
	} else {
		fmt.Fprintln(w, "DELIVERY FAILED:")
		for _, p := range res.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
}

// producerBound: the relay finished within 25% of the producer's time, so
// its throughput is the producer's.
func (s *SystemSummary) producerBound() bool {
	return s.ProducerRate > 0 && s.Throughput >= 0.8*s.ProducerRate
}

func (r RunResult) backlog() bool { return r.Workload == WorkloadBacklog }

func (ws WorkloadSummary) system(variant string) *SystemSummary { return *ws.slot(variant) }

// slot is where the summary of a variant goes.
func (ws *WorkloadSummary) slot(variant string) **SystemSummary {
	switch variant {
	case SystemFerry:
		return &ws.Ferry
	case variantFerryWAL:
		return &ws.FerryWAL
	}
	return &ws.Plain
}

// label is a variant's name in the tables: Ferry with --source poll is
// "ferry-poll" next to "ferry-wal", and "ferry" alone.
func (ws WorkloadSummary) label(variant string) string {
	if variant == SystemFerry && ws.FerryWAL != nil {
		return "ferry-poll"
	}
	return variant
}

// ranSystem is one system that ran a workload, as a table row: label is the
// workload's name on its first row, empty on the next; name is the
// variant's label.
type ranSystem struct {
	label, name string
	*SystemSummary
}

// ran lists the systems that ran the workload, Ferry first (poll, wal).
func (ws WorkloadSummary) ran() []ranSystem {
	var out []ranSystem
	for _, v := range variants {
		if s := ws.system(v); s != nil {
			label := ""
			if len(out) == 0 {
				label = ws.Name
			}
			out = append(out, ranSystem{label, ws.label(v), s})
		}
	}
	return out
}

// writePostgres prints PostgreSQL's work per event.
func (res *Results) writePostgres(w io.Writer) {
	measured, cpu := false, false
	for _, ws := range res.Workloads {
		for _, s := range ws.ran() {
			measured, cpu = measured || s.postgres, cpu || s.postgresCPU
		}
	}
	if !measured {
		return
	}
	fmt.Fprintf(w, "\nPostgreSQL per event (from emptied tables to 2s after the last event arrived, rows updated to the relay's stop; the producer's inserts included):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-12s\t%-11s\toutbox rows updated/ev\tof them HOT\tWAL bytes/ev\tCPU s/1k ev PostgreSQL\t\n", "workload", "system")
	for _, ws := range res.Workloads {
		for _, s := range ws.ran() {
			if !s.postgres {
				continue
			}
			c := "–"
			if s.postgresCPU {
				c = fmt.Sprintf("%.2f", s.PostgresCPUPer1k)
			}
			fmt.Fprintf(tw, "%-12s\t%-11s\t%.2f\t%.2f\t%s\t%s\t\n", s.label, s.name, s.OutboxUpdatesPerEvent, s.OutboxHOTUpdatesPerEvent, count(int(math.Round(s.WALBytesPerEvent))), c)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "  rows updated: pg_stat_user_tables.n_tup_upd of outbox_events (HOT updates included); WAL: pg_current_wal_lsn() difference, the whole cluster's\n")
	if cpu {
		fmt.Fprintf(w, "  CPU: utime + stime of the cluster's processes from /proc, ended backends included (the postmaster's cutime + cstime)\n")
	} else {
		fmt.Fprintf(w, "  CPU of PostgreSQL is measured only on the bench's own cluster (-sources with wal)\n")
	}
}

// oneLine is a run's outcome for the progress output.
func (r RunResult) oneLine() string {
	s := fmt.Sprintf("%s events in %s: %s events/s, p50 %s, p99 %s; lost %d, duplicates %d, out of order %d",
		count(r.Events), round(time.Duration(r.ElapsedSeconds*float64(time.Second))), count(int(math.Round(r.Throughput))),
		dur(r.Latency.P50), dur(r.Latency.P99), r.Verdict.Lost, r.Verdict.Duplicates, r.Verdict.OutOfOrder)
	if r.History != nil && r.Events > 0 {
		s += fmt.Sprintf("; %.2f history events/event", r.History.Events/float64(r.Events))
	}
	if p := r.Postgres; p != nil && r.Events > 0 {
		s += fmt.Sprintf("; PostgreSQL: %.2f outbox updates/event, %s WAL bytes/event", float64(p.RowsUpdated)/float64(r.Events), count(int(p.WALBytes)/r.Events))
		if p.CPUSeconds != nil {
			s += fmt.Sprintf(", %.2f CPU s/1k events", *p.CPUSeconds*1000/float64(r.Events))
		}
	}
	if r.Problem != "" {
		s += "; " + r.Problem
	}
	return s
}

// WriteJSON writes the results as indented JSON, with URLs' passwords
// hidden.
func (res *Results) WriteJSON(w io.Writer) error {
	out := *res
	out.Config.PostgresURL = redactURL(out.Config.PostgresURL)
	out.Config.AMQPURL = redactURL(out.Config.AMQPURL)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// readMachine describes this machine from /proc.
func readMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemoryMiB = int(statusKiB(b, "MemTotal:") >> 10)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAtStart = strings.Join(f[:3], " ")
		}
	}
	return m
}
