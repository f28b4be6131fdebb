package bench

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func TestSummarize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		samples []time.Duration
		want    Latency
	}{
		{name: "none", samples: nil, want: Latency{}},
		{name: "one", samples: []time.Duration{ms(7)}, want: Latency{P50: ms(7), P95: ms(7), P99: ms(7), Max: ms(7), N: 1}},
		{name: "unsorted four", samples: []time.Duration{ms(4), ms(1), ms(3), ms(2)},
			// nearest rank: p50 → rank 2, p95 and p99 → rank 4.
			want: Latency{P50: ms(2), P95: ms(4), P99: ms(4), Max: ms(4), N: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Summarize(tt.samples))
		})
	}
}

func TestPercentileOfHundred(t *testing.T) {
	t.Parallel()
	s := make([]time.Duration, 100)
	for i := range s {
		s[i] = ms(float64(i + 1)) // 1..100 ms
	}
	got := Summarize(s)
	require.Equal(t, Latency{P50: ms(50), P95: ms(95), P99: ms(99), Max: ms(100), N: 100}, got)
	require.Equal(t, ms(1), Percentile(s, 0.5))
}

func TestMedian(t *testing.T) {
	t.Parallel()
	require.True(t, math.IsNaN(Median(nil)))
	require.Equal(t, 2.0, Median([]float64{3, 1, 2}))
	require.Equal(t, 2.0, Median([]float64{math.NaN(), 3, 1, math.NaN()}), "NaN: not measured, skipped")
	require.True(t, math.IsNaN(Median([]float64{math.NaN()})))
	xs := []float64{4, 1, 3, 2}
	require.Equal(t, 2.5, Median(xs))
	require.Equal(t, []float64{4, 1, 3, 2}, xs, "Median must not reorder its input")
	require.Equal(t, ms(2), medianDuration([]time.Duration{ms(3), ms(1), ms(2)}))
}

func TestParseProc(t *testing.T) {
	t.Parallel()
	// A command name with spaces and a parenthesis, as the kernel allows.
	stat := []byte("4242 (we ird) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 9 0 100 1000 200 18446744073709551615")
	cpu, err := parseStatCPU(stat)
	require.NoError(t, err)
	require.Equal(t, 3800*time.Millisecond, cpu) // (250 + 130) ticks of 10 ms
	_, err = parseStatCPU([]byte("garbage"))
	require.Error(t, err)

	status := []byte("Name:\tferry\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n")
	require.EqualValues(t, 204800, statusKiB(status, "VmHWM:"))
	require.EqualValues(t, 102400, statusKiB(status, "VmRSS:"))
	require.EqualValues(t, 0, statusKiB(status, "VmSwap:"))
}

func TestReadProcOfThisProcess(t *testing.T) {
	t.Parallel()
	s, err := ReadProc(os.Getpid())
	require.NoError(t, err)
	require.Positive(t, s.RSS)
	require.GreaterOrEqual(t, s.PeakRSS, s.RSS)
}

func TestTally(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	tally := NewTally("order")
	add := func(id, agg string, v int64, at time.Duration) {
		tally.Add(Receipt{ID: id, AggregateType: "order", AggregateID: agg, Version: v, At: t0.Add(at)})
	}
	add("a1", "a", 1, ms(10))
	add("a2", "a", 2, ms(20))
	add("a1", "a", 1, ms(25)) // duplicate of an earlier event: not a disorder
	add("b2", "b", 2, ms(30)) // b's version 2 before 1
	add("b1", "b", 1, ms(40))
	add("x1", "x", 1, ms(50)) // never committed
	tally.Add(Receipt{ID: "old", AggregateType: "other-run", AggregateID: "a", Version: 9, At: t0})
	require.Equal(t, 5, tally.Received())

	committed := map[string]time.Time{"a1": t0, "a2": t0, "b1": t0, "b2": t0, "c1": t0}
	v, lat, last := tally.Check(committed)
	require.Equal(t, Verdict{Lost: 1, Duplicates: 1, OutOfOrder: 2, Unexpected: 1, Stray: 1}, v)
	require.False(t, v.OK())
	require.ElementsMatch(t, []time.Duration{ms(10), ms(20), ms(30), ms(40)}, lat)
	require.Equal(t, t0.Add(ms(50)), last)

	clean := NewTally("order")
	clean.Add(Receipt{ID: "a1", AggregateType: "order", AggregateID: "a", Version: 1, At: t0.Add(-ms(1))})
	v, lat, _ = clean.Check(map[string]time.Time{"a1": t0})
	require.True(t, v.OK())
	require.Equal(t, []time.Duration{0}, lat, "a receipt noted before the commit counts as 0, not negative")
}

// The warm-up split and the timeline see the same receipts as Check, by
// commit time.
func TestLatenciesAfterWarmUpAndTimeline(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	tally := NewTally("order")
	committed := map[string]time.Time{}
	for i, c := range []struct {
		id        string
		at, delay time.Duration
	}{{"e1", 0, 9 * time.Second}, {"e2", 5 * time.Second, 4 * time.Second}, {"e3", WarmUp, ms(80)}, {"e4", WarmUp + time.Second, ms(120)}, {"e5", WarmUp + 2*time.Second, 0}} {
		committed[c.id] = t0.Add(c.at)
		if c.id != "e5" { // e5 is lost: in neither
			tally.Add(Receipt{ID: c.id, AggregateType: "order", AggregateID: "a", Version: int64(i + 1), At: t0.Add(c.at + c.delay)})
		}
	}
	require.ElementsMatch(t, []time.Duration{ms(80), ms(120)}, tally.latenciesAfter(committed, t0.Add(WarmUp)))

	var buf bytes.Buffer
	require.NoError(t, tally.writeTimeline(&buf, committed))
	require.Equal(t, "commit_ms,latency_ms,event_id\n"+
		"0.0,9000.0,e1\n5000.0,4000.0,e2\n10000.0,80.0,e3\n11000.0,120.0,e4\n", buf.String())
}

func TestInOrderHoldsBackVersionsAfterAGap(t *testing.T) {
	t.Parallel()
	rows := []relayRow{
		{id: "a3", aggType: "o", aggID: "a", version: 3, delivered: 1},
		{id: "b1", aggType: "o", aggID: "b", version: 1, delivered: 0},
		{id: "a2", aggType: "o", aggID: "a", version: 2, delivered: 1},
		{id: "c3", aggType: "o", aggID: "c", version: 3, delivered: 1}, // c's 2 is not in this claim
		{id: "a5", aggType: "o", aggID: "a", version: 5, delivered: 1}, // a's 4 is not either
	}
	var ids []string
	for _, r := range inOrder(rows) {
		ids = append(ids, r.id)
	}
	require.Equal(t, []string{"a2", "a3", "b1"}, ids)
}

func TestMemoryGrowth(t *testing.T) {
	t.Parallel()
	pts := []memPoint{
		{Received: 0, RelayMiB: 50, TemporalMiB: 200},
		{Received: 400, RelayMiB: 80, TemporalMiB: 250},
		{Received: 600, RelayMiB: 120, TemporalMiB: 240},
		{Received: 1000, RelayMiB: 100, TemporalMiB: 245},
	}
	r, tm := memoryGrowth(pts, 1000)
	require.InDelta(t, 1.5, r, 1e-9)
	require.InDelta(t, 0.98, tm, 1e-9)
	r, tm = memoryGrowth(pts[:1], 1000)
	require.Zero(t, r, "one half without samples: unknown")
	require.Zero(t, tm)
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	c, err := Config{Workloads: []string{WorkloadBacklog, WorkloadBurst, WorkloadBurst}}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, []string{WorkloadBurst, WorkloadBacklog}, c.Workloads, "run order is fixed, duplicates dropped")
	require.Equal(t, 16, c.Clients)
	require.Equal(t, 3, c.Reps)
	require.Equal(t, []string{SystemFerry, SystemLane, SystemPlain}, c.Systems, "all three systems, in one run")
	c, err = Config{Systems: []string{SystemPlain, SystemLane, SystemPlain}}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, []string{SystemLane, SystemPlain}, c.Systems, "fixed order, duplicates dropped")
	c, err = Config{Workloads: []string{WorkloadCeiling, WorkloadOnePerAgg}}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, []string{WorkloadOnePerAgg, WorkloadCeiling}, c.Workloads, "the ceiling runs next to the workload it is compared with")
	c, err = Config{Workloads: []string{WorkloadOnePerAgg, WorkloadBurstStartNoBroker, WorkloadBurstStart, WorkloadBurst}}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, []string{WorkloadBurst, WorkloadBurstStart, WorkloadBurstStartNoBroker, WorkloadOnePerAgg}, c.Workloads, "the destination's workloads run next to burst")
	require.Equal(t, 1_000, ceilingWorkflows(0.1), "as many runs as one-per-agg starts")
	c, err = Config{FerryBin: "out/ferry", TemporalPostgresURL: "postgres://h/postgres", TemporalCluster: 2}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, "out/ferry-dev", c.FerryDevBin, "the cluster's processes run the ferry-dev next to ferry")
	require.Contains(t, c.temporalPersistence(), "a frontend and 2 history")

	for _, tt := range []struct {
		cfg   Config
		field string
	}{
		{Config{Scale: -1}, "Config.Scale"},
		{Config{Workloads: []string{"bursty"}}, "Config.Workloads"},
		{Config{Systems: []string{"kafka"}}, "Config.Systems"},
		{Config{Schema: "public"}, "Config.Schema"},
		{Config{Schema: "Robert'); DROP"}, "Config.Schema"},
		{Config{SteadyDuration: time.Millisecond}, "Config.SteadyDuration"},
		{Config{TemporalCluster: 2}, "Config.TemporalPostgresURL"},
		{Config{TemporalCluster: -1, TemporalPostgresURL: "postgres://h/postgres"}, "Config.TemporalCluster"},
	} {
		_, err := tt.cfg.WithDefaults()
		require.ErrorContains(t, err, tt.field)
	}
}

func TestShapes(t *testing.T) {
	t.Parallel()
	require.Equal(t, 10_000, shapeOf(WorkloadBurst, 1).events(0))
	require.Equal(t, 10_000, shapeOf(WorkloadOnePerAgg, 1).events(0))
	require.Equal(t, 5_000, shapeOf(WorkloadHot, 1).events(0))
	require.Equal(t, 100_000, shapeOf(WorkloadBacklog, 1).events(0))
	require.Equal(t, 1_000, shapeOf(WorkloadBurst, 0.1).events(0))
	require.Equal(t, 2_000, shapeOf(WorkloadBurstStart, 1).events(0))
	require.Equal(t, 200, shapeOf(WorkloadBurstStartNoBroker, 0.1).events(0), "bench-quick: 200 workflow starts per Ferry run")
	require.True(t, shapeOf(WorkloadBurstStart, 1).destination)
	require.False(t, shapeOf(WorkloadBurstStart, 1).noBroker)
	require.True(t, shapeOf(WorkloadBurstStartNoBroker, 1).noBroker)
	require.False(t, shapeOf(WorkloadBurst, 1).destination)
	require.Equal(t, 3_000, shapeOf(WorkloadSteady500, 1).events(6*time.Second))
	require.Equal(t, 1, shapeOf(WorkloadHot, 0.0001).txs, "scaled down, a workload keeps at least one transaction")
	require.Equal(t, "1,000 aggregates × 10 events, 1 KiB payloads, one transaction per aggregate", shapeOf(WorkloadBurst, 1).what)
	require.Equal(t, "1,234,567", count(1234567))
	require.Equal(t, "-1,000", count(-1000))
	require.Equal(t, "999", count(999))
}

// sampleResults is a small, made-up run of every workload.
func sampleResults() *Results {
	cfg, _ := Config{Reps: 1, PostgresURL: "postgres://bench:s3cret@db/x", AMQPURL: "amqp://guest:hunter2@mq/"}.WithDefaults()
	res := &Results{Config: cfg, Duration: 90 * time.Second, Machine: Machine{CPUs: 2, CPUModel: "test CPU", LoadAtStart: "1.00 1.00 1.00"}}
	// Server counts per event of the Ferry runs: state transitions, actions.
	perEvent := map[string][2]float64{WorkloadBurst: {0.15, 0.3}, WorkloadBurstStart: {3.2, 1.2}, WorkloadOnePerAgg: {6, 3}}
	run := func(w, sys string, eps float64, p99 time.Duration, hist float64) RunResult {
		r := RunResult{Workload: w, System: sys, Rep: 1, Events: 1000, Throughput: eps,
			Latency: Latency{P50: p99 / 4, P95: p99 / 2, P99: p99, Max: 2 * p99, N: 1000},
			Relay:   ProcFigures{CPUPer1k: 0.5, PeakMiB: 40}, latencies: []time.Duration{p99 / 4, p99}}
		if strings.HasPrefix(w, "steady") {
			r.Warm = &Latency{P50: p99 / 8, P95: p99 / 4, P99: p99 / 2, Max: p99, N: 900}
		}
		if sys == SystemFerry {
			r.Temporal = &ProcFigures{CPUPer1k: 2, PeakMiB: 300}
			r.History = &History{Aggregates: 100, Sampled: 100, Runs: 100, Events: hist * 1000, WorkflowTasks: 400}
			pe := cmp.Or(perEvent[w], [2]float64{1, 1})
			r.Server = &ServerCost{Seconds: 5, StateTransitions: pe[0] * 1000, Actions: pe[1] * 1000, VisibilityWrites: 300,
				RunsStarted: 100, RunsCompleted: 40, PersistenceRequests: 9000, PersistenceMean: ms(2), PersistenceP99: ms(40)}
		}
		if w == WorkloadBacklog {
			r.Memory = []memPoint{{Received: 100, RelayMiB: 60, TemporalMiB: 300}, {Received: 900, RelayMiB: 70, TemporalMiB: 310}}
		}
		return r
	}
	res.Runs = []RunResult{
		run(WorkloadBurst, SystemFerry, 600, ms(900), 1.8), run(WorkloadBurst, SystemPlain, 1000, ms(300), 0),
		run(WorkloadBurstStart, SystemFerry, 120, ms(1500), 1.8), run(WorkloadBurstStart, SystemPlain, 1000, ms(300), 0),
		run(WorkloadBurstStartNoBroker, SystemFerry, 130, ms(1400), 1.8), run(WorkloadBurstStartNoBroker, SystemPlain, 1000, ms(300), 0),
		run(WorkloadOnePerAgg, SystemFerry, 200, ms(900), 5), run(WorkloadOnePerAgg, SystemPlain, 1000, ms(90), 0),
		run(WorkloadHot, SystemFerry, 300, ms(900), 1.5), run(WorkloadHot, SystemPlain, 1000, ms(90), 0),
		run(WorkloadSteady100, SystemFerry, 100, ms(300), 3), run(WorkloadSteady100, SystemPlain, 100, ms(20), 0),
		run(WorkloadSteady500, SystemFerry, 500, ms(200), 3), run(WorkloadSteady500, SystemPlain, 500, ms(20), 0),
		run(WorkloadBacklog, SystemFerry, 250, ms(9000), 2), run(WorkloadBacklog, SystemPlain, 2000, ms(900), 0),
	}
	// The publish-first lane: every event published directly, at no cost
	// to the server, but where a run hands aggregates over.
	lane := func(w string, eps float64, p99 time.Duration) RunResult {
		r := run(w, SystemLane, eps, p99, 0)
		r.Temporal = &ProcFigures{CPUPer1k: 0.1, PeakMiB: 200}
		r.History = &History{}
		r.Server = &ServerCost{Seconds: 5, PersistenceRequests: 40}
		r.Lane = &LaneCounts{Events: 1000, Direct: 1000, FirstAttempt: 1000, ToWorkflow: map[string]int{}}
		return r
	}
	start := lane(WorkloadBurstStart, 110, ms(1600))
	start.Server = &ServerCost{Seconds: 5, StateTransitions: 3400, Actions: 1400, VisibilityWrites: 2200, RunsStarted: 1100}
	start.History = &History{Aggregates: 100, Sampled: 100, Runs: 100, Events: 1500, WorkflowTasks: 300}
	start.Lane = &LaneCounts{Events: 1000, ViaWorkflow: 1000, ToWorkflow: map[string]int{"NeedsWorkflow": 100}, ToLane: 100, Workflows: 100}
	probed := lane(WorkloadSteady500, 500, ms(150))
	probed.Server.StateTransitions, probed.Server.Actions = 9, 4
	probed.Lane.ToWorkflow = map[string]int{"Unroutable": 1}
	probed.Lane.Workflows = 1
	probed.Probe = &Probe{AtSeconds: 30, Handed: ms(40), Cause: "Unroutable", Listed: ms(1200), Retrying: ms(2100)}
	after := lane(WorkloadSteadyAfterBurst, 100, ms(80))
	after.BurstEvents = 1000
	after.Lane.Events, after.Lane.Direct, after.Lane.FirstAttempt = 2000, 2000, 1990
	res.Runs = append(res.Runs,
		lane(WorkloadBurst, 900, ms(200)), start, lane(WorkloadOnePerAgg, 700, ms(100)), lane(WorkloadHot, 950, ms(95)),
		lane(WorkloadSteady100, 100, ms(60)), probed, after, lane(WorkloadBacklog, 1800, ms(1000)),
		run(WorkloadSteadyAfterBurst, SystemPlain, 100, ms(20), 0))
	res.Commit = &CommitSummary{Clients: 16, Seconds: 10, BusinessOnly: 2000, WithOutbox: 800, WithOutboxNoNotify: 1800,
		OutboxCost: 0.6, OutboxCostNoNotify: 0.1, WithPlainRow: 1700, PlainRowCost: 0.15}
	ceiling := func(variant string, rate, eager float64) CeilingRun {
		return CeilingRun{Variant: variant, Rep: 1, Workflows: 1000, Completed: 1000, ElapsedSeconds: 1000 / rate, Rate: rate,
			Temporal: ProcFigures{CPUPer1k: 1.5, PeakMiB: 280},
			Server: &ServerCost{StateTransitions: 3000, Actions: 1000, VisibilityWrites: 1000, RunsStarted: 1000, RunsCompleted: 1000,
				EagerStarts: eager, PersistenceMean: ms(1), PersistenceP99: ms(20)}}
	}
	res.CeilingRuns = []CeilingRun{ceiling(ceilingSWS, 300, 0), ceiling(ceilingEager, 500, 1000)}
	res.summarize()
	return res
}

func TestTargetsAreComputedFromTheFigures(t *testing.T) {
	t.Parallel()
	res := sampleResults()
	var got []string
	for _, tg := range res.Targets {
		got = append(got, tg.Status+" "+strings.Fields(tg.Goal)[0]+" "+tg.Got)
	}
	require.Equal(t, []string{
		"PASS burst: 0.60× (600 vs 1,000 events/s)",
		"MISS one-per-agg: 0.20× (200 vs 1,000 events/s)",
		"MISS backlog: 0.12× (250 vs 2,000 events/s)",
		"MISS steady-100: p99 300ms (after the first 10s: p99 150ms)",
		"MISS one-per-agg: 6.00 state transitions, 3.00 billed actions",
		"PASS burst: 0.15",
		"MISS one-per-agg: 40% (200 events/s vs 500 workflows/s by eager start; signal-with-start 300/s)",
		"MISS commit: 60% (2,000 → 800 commits/s; 10% with NOTIFY off); a plain second row costs 15%",
		"PASS backlog: ferry ×1.17 (peak 40 MiB), Temporal ×1.03 (peak 300 MiB)",
		"PASS burst: 0.90× (900 vs 1,000 events/s)",
		"MISS one-per-agg: 0.70× (700 vs 1,000 events/s)",
		"PASS backlog: 0.90× (1,800 vs 2,000 events/s)",
		"PASS steady-100: p99 60.0ms, 100 events/s delivered (after the first 10s: p99 30.0ms)",
		"MISS steady-500: p99 150ms, 500 events/s delivered (after the first 10s: p99 75.0ms)",
		"PASS steady-100-after-burst: p99 80.0ms, 100 events/s delivered (after the first 10s: p99 40.0ms)",
		// The burst-start run (every aggregate handed over) and the probe's
		// run are left out: their workflows' cost is not of events the lane
		// published.
		"PASS publish-first: 0 state transitions, 0 billed actions over 7,000 events in 6 runs (burst, one-per-agg, hot, steady-100, steady-100-after-burst, backlog): " +
			"7,000 published directly, 6,990 at their first attempt; 2 runs with a handoff (a destination, the probe, a failure) left out",
		"PASS steady-500: listed after 1.20s (handed over after 40.0ms, the activity's second attempt after 2.10s), median of 1",
		"NOT RUN ferry needs -baseline, an earlier results.json",
	}, got)
	require.Empty(t, res.Problems)

	for _, tg := range res.Targets {
		if strings.HasPrefix(tg.Goal, "ferry (workflow lane) no worse") {
			require.Equal(t, SystemFerry, tg.System, "the baseline's target is the workflow lane's")
		} else if strings.Contains(tg.Goal, "publish-first") {
			require.Equal(t, SystemLane, tg.System, tg.Goal)
		} else {
			require.Equal(t, SystemFerry, tg.System, tg.Goal)
		}
	}

	ws := res.workload(WorkloadBurst)
	require.InDelta(t, 0.6, ws.ThroughputRatio, 1e-9)
	require.InDelta(t, 0.9, ws.LaneThroughputRatio, 1e-9)
	require.Equal(t, &CostPerUnit{}, ws.Lane.ServerPerEvent, "measured, and nothing")
	require.True(t, ws.Lane.history)
	after := res.workload(WorkloadSteadyAfterBurst)
	require.Equal(t, &LaneCounts{Events: 2000, Direct: 2000, FirstAttempt: 1990}, after.Lane.Lane)
	require.Equal(t, &ProbeSummary{Reps: 1, Handed: ms(40), Listed: ms(1200), Retrying: ms(2100)}, res.workload(WorkloadSteady500).Lane.Probe)
	require.InDelta(t, 3.0, ws.P99Ratio, 1e-9)
	require.InDelta(t, 0.4, ws.Ferry.WorkflowTasksPerEvent, 1e-9)
	require.Equal(t, &CostPerUnit{StateTransitions: 0.15, Actions: 0.3, VisibilityWrites: 0.3, RunsStarted: 0.1}, ws.Ferry.ServerPerEvent)
	require.Nil(t, ws.Plain.ServerPerEvent, "the plain relay has no Temporal")
	require.InDelta(t, 0.4, res.Ceiling.FerryFraction, 1e-9, "over the faster start")

	// Half the data: targets without their workload are not run, not passed.
	partial := &Results{Config: res.Config, Runs: res.Runs[:2]}
	partial.Config.Workloads = []string{WorkloadBurst}
	partial.summarize()
	statuses := map[string]int{}
	for _, tg := range partial.Targets {
		statuses[tg.Status]++
	}
	require.Equal(t, map[string]int{Pass: 2, NotRun: 16}, statuses)
	require.Nil(t, partial.Ceiling)
}

func TestLostEventsAreProblems(t *testing.T) {
	t.Parallel()
	res := sampleResults()
	res.Runs[0].Verdict = Verdict{Lost: 3, OutOfOrder: 1}
	res.summarize()
	require.Len(t, res.Problems, 2)
	require.Contains(t, res.Problems[0], "burst · ferry · rep 1: 3 of 1,000 events LOST")
	var out bytes.Buffer
	res.WriteTable(&out)
	require.Contains(t, out.String(), "DELIVERY FAILED")
}

func TestWriteTableAndJSON(t *testing.T) {
	t.Parallel()
	res := sampleResults()
	var out bytes.Buffer
	res.WriteTable(&out)
	text := out.String()
	for _, want := range []string{
		"Throughput and latency", "burst", "one-per-agg", "backlog", "ferry/plain", "0.60×", "3.0×",
		"Cost per event", "1.80", "Producer commit rate", "2,000", "60%",
		"PASS", "MISS", "every committed event was received",
		"steady-100 ferry after the first 10s (every aggregate's first event in it): p50 37.5ms, p95 75.0ms, p99 150ms, max 300ms",
		"got p99 300ms (after the first 10s: p99 150ms)",
		"+ a plain second row (reference: any insert)", "1,700", "a plain second row costs 15%",
		"Temporal's own count of its work per event", "6.00", "billed actions:", "The same in all", "6,000",
		"burst-start: received = the row marked published", "burst-start-no-broker: received = the row marked published", "3.20", "0.12×",
		"Engine ceiling: 1,000 trivial workflows", "signal-with-start", "eager start", "100%", "= 67% of the signal-with-start ceiling, 40% of the eager start ceiling",
		"publish-first = bin/ferry run\n--lane publish-first", "publish-first/plain", "0.90×",
		"burst-start publish-first: every event needs the workflow", "burst-start-no-broker: not run in publish-first",
		"steady-100-after-burst: figures of the steady phase, which starts once the burst's 10,000 events were received",
		"Where publish-first's events went", "NeedsWorkflow 100", "Unroutable 1",
		"handoff probe (steady-500)",
		"the workflow lane (ferry):", "the publish-first lane (issue 24):",
	} {
		require.Contains(t, text, want)
	}

	var buf bytes.Buffer
	require.NoError(t, res.WriteJSON(&buf))
	require.NotContains(t, buf.String(), "s3cret")
	require.NotContains(t, buf.String(), "hunter2")
	var back struct {
		Workloads []struct {
			Name  string `json:"name"`
			Ferry struct {
				Throughput float64 `json:"events_per_second"`
				Latency    struct {
					P99 int64 `json:"p99_ns"`
				} `json:"latency"`
				History float64 `json:"history_events_per_event"`
			} `json:"ferry"`
			Ratio float64 `json:"throughput_ratio_ferry_over_plain"`
		} `json:"workloads"`
		Targets []Target `json:"targets"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	require.Len(t, back.Workloads, 9)
	require.Equal(t, "burst", back.Workloads[0].Name)
	require.Equal(t, 600.0, back.Workloads[0].Ferry.Throughput)
	require.Equal(t, ms(900).Nanoseconds(), back.Workloads[0].Ferry.Latency.P99)
	require.InDelta(t, 1.8, back.Workloads[0].Ferry.History, 1e-9)
	require.InDelta(t, 0.6, back.Workloads[0].Ratio, 1e-9)
	require.Len(t, back.Targets, 18)
}

func TestCDFPoints(t *testing.T) {
	t.Parallel()
	require.Nil(t, cdfPoints(nil, 10))
	pts := cdfPoints([]time.Duration{ms(3), 0, ms(1), ms(2)}, 10)
	require.Len(t, pts, 4)
	require.Equal(t, 0.1, pts[0].X, "0 ms is drawn at 0.1 ms on the log axis")
	require.Equal(t, 3.0, pts[3].X)
	require.Equal(t, 1.0, pts[3].Y)
	require.Len(t, cdfPoints(make([]time.Duration, 1000), 50), 50)
}

func TestDurationTicks(t *testing.T) {
	t.Parallel()
	labels := func(lo, hi float64) []string {
		var out []string
		for _, tk := range (durationTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	require.Equal(t, []string{"0.1ms", "1ms", "10ms", "100ms", "1s", "10s"}, labels(0.1, 60_000))
	require.Equal(t, []string{"20ms", "50ms", "100ms", "200ms", "500ms"}, labels(15, 900))
	require.Equal(t, "2min", msLabel(120_000))
}

func TestWritePlot(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/latency.png"
	require.NoError(t, sampleResults().WritePlot(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("\x89PNG")), "a PNG file")
}
