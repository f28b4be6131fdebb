package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
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

	// baseline is Config.Baseline's results, read before the run.
	baseline *Results
}

// ReadBaseline reads an earlier results.json for Config.Baseline.
func ReadBaseline(path string) (*Results, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the baseline: %w", err)
	}
	defer f.Close()
	var b Results
	if err := json.NewDecoder(f).Decode(&b); err != nil {
		return nil, fmt.Errorf("read the baseline %s: not a ferry-bench results.json: %w", path, err)
	}
	if len(b.Workloads) == 0 {
		return nil, fmt.Errorf("read the baseline %s: it has no workloads", path)
	}
	return &b, nil
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
	// Latency is commit → first receipt by the consumer; on a destination
	// workload (burst-start) commit → the row marked published, for every
	// system.
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
	Memory []memPoint `json:"memory,omitempty"`
	// BurstEvents are the events of the burst committed and delivered
	// before the steady phase (WorkloadSteadyAfterBurst); Events,
	// Throughput and Latency are the steady phase's, the verdict is of
	// both, and the costs per event divide by both.
	BurstEvents int `json:"burst_events,omitempty"`
	// Lane is where the run's events went in the publish-first lane
	// (SystemLane runs only), from the rows.
	Lane *LaneCounts `json:"lane,omitempty"`
	// Probe is the publish-first lane's handoff probe (SystemLane on
	// probeWorkload only).
	Probe   *Probe `json:"handoff_probe,omitempty"`
	Problem string `json:"problem,omitempty"`

	latencies []time.Duration
}

// Variants: a system with its source, as runs are grouped and shown.
const (
	variantFerryWAL = "ferry-wal"
	variantLaneWAL  = "publish-first-wal"
)

// variants in the order of the tables; each Ferry system with --source
// poll is the system's name, as before there were sources.
var variants = []string{SystemFerry, variantFerryWAL, SystemLane, variantLaneWAL, SystemPlain}

// variantOf names a system with its source: "ferry" (source poll, or none
// in results of older benches), "ferry-wal", "publish-first",
// "publish-first-wal", "plain".
func variantOf(system, source string) string {
	if isFerry(system) && source == SourceWAL {
		return system + "-" + SourceWAL
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
	// Ferry is Ferry's workflow lane with --source poll (as shipped),
	// FerryWAL with --source wal; Lane and LaneWAL the same in the
	// publish-first lane.
	Ferry    *SystemSummary `json:"ferry,omitempty"`
	FerryWAL *SystemSummary `json:"ferry_wal,omitempty"`
	Lane     *SystemSummary `json:"publish_first,omitempty"`
	LaneWAL  *SystemSummary `json:"publish_first_wal,omitempty"`
	Plain    *SystemSummary `json:"plain,omitempty"`
	// ThroughputRatio and P99Ratio are Ferry (poll) / plain of the
	// medians; 0 when a system did not run.
	ThroughputRatio float64 `json:"throughput_ratio_ferry_over_plain,omitempty"`
	P99Ratio        float64 `json:"p99_ratio_ferry_over_plain,omitempty"`
	// LaneThroughputRatio and LaneP99Ratio are the publish-first lane
	// (poll) / plain.
	LaneThroughputRatio float64 `json:"throughput_ratio_publish_first_over_plain,omitempty"`
	LaneP99Ratio        float64 `json:"p99_ratio_publish_first_over_plain,omitempty"`
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
	// history: the histories were read (a publish-first run may have
	// none to read: 0 per event, not unmeasured).
	history bool
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

	// Lane sums where the events went in the publish-first lane over the
	// reps (SystemLane only).
	Lane *LaneCounts `json:"lane,omitempty"`
	// Probe is the handoff probe's figures, medians over the reps.
	Probe *ProbeSummary `json:"handoff_probe,omitempty"`

	Lost       int `json:"lost"`
	Duplicates int `json:"duplicates"`
	OutOfOrder int `json:"out_of_order"`
	Unexpected int `json:"unexpected"`
}

// Target is one of the benchmark's goals checked against what was
// measured.
type Target struct {
	// System is whose goal it is: the workflow lane's (ferry) or the
	// publish-first lane's.
	System string `json:"system"`
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

func (r RunResult) backlog() bool { return r.Workload == WorkloadBacklog }

func (ws WorkloadSummary) system(variant string) *SystemSummary { return *ws.slot(variant) }

// slot is where the summary of a variant goes.
func (ws *WorkloadSummary) slot(variant string) **SystemSummary {
	switch variant {
	case SystemFerry:
		return &ws.Ferry
	case variantFerryWAL:
		return &ws.FerryWAL
	case SystemLane:
		return &ws.Lane
	case variantLaneWAL:
		return &ws.LaneWAL
	}
	return &ws.Plain
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
