package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/workflows"
)

// The lane's counters as `ferry run` serves them (package metrics): known
// label values start at 0 and are not counted as handoffs.
func TestLaneCountsOfFerryMetrics(t *testing.T) {
	t.Parallel()
	text := `# TYPE ferry_lane_published_total counter
ferry_lane_published_total{path="direct"} 1990
ferry_lane_published_total{path="workflow"} 10
# TYPE ferry_lane_handoffs_total counter
ferry_lane_handoffs_total{cause="Unroutable",direction="to_workflow"} 2
ferry_lane_handoffs_total{cause="NeedsWorkflow",direction="to_workflow"} 1
ferry_lane_handoffs_total{cause="released",direction="to_lane"} 3
ferry_lane_handoffs_total{cause="reconciled",direction="to_lane"} 0
ferry_lane_handoffs_total{cause="Nacked",direction="to_workflow"} 0
`
	m, err := parseServerMetrics(strings.NewReader(text))
	require.NoError(t, err)
	c := laneCountsOf(m)
	require.Equal(t, &LaneCounts{Direct: 1990, ViaWorkflow: 10, ToWorkflow: map[string]int{"Unroutable": 2, "NeedsWorkflow": 1}, ToLane: 3}, c)
	require.Equal(t, 3, c.handoffs())
	require.Equal(t, "NeedsWorkflow 1, Unroutable 2", c.causes())

	none, err := parseServerMetrics(strings.NewReader("# TYPE go_goroutines gauge\ngo_goroutines 12\n"))
	require.NoError(t, err)
	require.Equal(t, &LaneCounts{ToWorkflow: map[string]int{}}, laneCountsOf(none), "a process that published nothing")
	require.Equal(t, "none", laneCountsOf(none).causes())
}

func TestAggregatesOfWorkflowIDs(t *testing.T) {
	t.Parallel()
	run := "r7_steady-500_publish-first"
	ids := []string{workflows.WorkflowID(run, "a000001"), workflows.WorkflowID(probeType(run), probeAggregate), workflows.WorkflowID(run, "a000042"),
		workflows.WorkflowID("r6_burst_ferry", "a000001")}
	require.Equal(t, []string{"a000001", "a000042"}, aggregatesOf(ids, run), "the run's aggregates; the probe's and other runs' are not")
}

func TestProbeSummaryCountsUnseenAsLongest(t *testing.T) {
	t.Parallel()
	require.Equal(t, ms(30), medianSeen([]time.Duration{ms(30), ms(10), 0}))
	require.Zero(t, medianSeen([]time.Duration{ms(30), 0, 0}), "most reps never saw it: not seen")
	require.Zero(t, medianSeen(nil))
	require.Equal(t, ms(30), medianSeen([]time.Duration{ms(10), ms(30)}), "of two, the upper")
	require.Zero(t, medianSeen([]time.Duration{ms(10), 0}), "of two, the upper: not seen")

	runs := []RunResult{
		{Rep: 1, Probe: &Probe{Handed: ms(20), Listed: ms(900), Retrying: ms(1500)}},
		{Rep: 2, Probe: &Probe{Handed: ms(30), Problem: "not listed"}},
		{Rep: 3, Probe: &Probe{Handed: ms(25), Listed: ms(700), Retrying: ms(1400)}},
		{Rep: 4},
	}
	require.Equal(t, &ProbeSummary{Reps: 3, Handed: ms(25), Listed: ms(900), Retrying: ms(1500), Problems: []string{"rep 2: not listed"}}, summarizeProbe(runs))
	require.Nil(t, summarizeProbe(runs[3:]), "no probe in any rep")
}

// The workflow lane is held against an earlier run's ratio to the plain
// relay and server counts, workload by workload, with a margin.
func TestBaselineTarget(t *testing.T) {
	t.Parallel()
	baseline := sampleResults()
	res := sampleResults()
	res.baseline = baseline
	res.summarize()
	tg := res.Targets[len(res.Targets)-1]
	require.Equal(t, Pass, tg.Status, tg.Got)
	require.Contains(t, tg.Got, "burst 0.60× vs 0.60×, 0.15 / 0.30 vs 0.15 / 0.30 transitions / actions per event")

	// Slower by more than the margin on one workload: a miss.
	for i, r := range res.Runs {
		if r.Workload == WorkloadBurst && r.System == SystemFerry {
			res.Runs[i].Throughput = 500 // 0.50× against the baseline's 0.60×: below 0.9 × 0.60
		}
	}
	res.summarize()
	tg = res.Targets[len(res.Targets)-1]
	require.Equal(t, Miss, tg.Status)
	require.Contains(t, tg.Got, "burst 0.50× vs 0.60×")

	// More state transitions per event than the baseline's, within the
	// ratio's margin: a miss too.
	res = sampleResults()
	for i, r := range res.Runs {
		if r.Workload == WorkloadOnePerAgg && r.System == SystemFerry {
			res.Runs[i].Server.StateTransitions = 6100 // 6.10 per event against 6.00
		}
	}
	res.baseline = baseline
	res.summarize()
	require.Equal(t, Miss, res.Targets[len(res.Targets)-1].Status)

	res.baseline = &Results{Config: baseline.Config}
	res.summarize()
	require.Equal(t, NotRun, res.Targets[len(res.Targets)-1].Status, "a baseline without the workflow lane's figures")
}

func TestSteadyAfterBurstShape(t *testing.T) {
	t.Parallel()
	s := shapeOf(WorkloadSteadyAfterBurst, 0.1)
	require.Equal(t, 100, s.burst)
	require.Equal(t, 100.0, s.rate)
	require.Equal(t, 1_000+600, s.events(6*time.Second), "the burst's events and the steady phase's")
	require.Len(t, s.aggregateIDs(s.events(6*time.Second)), 100, "the burst's aggregates, the steady phase's among them")
	require.Len(t, shapeOf(WorkloadSteadyAfterBurst, 1).aggregateIDs(10_600), 1_000)
	b := burstShape(s.burst)
	require.Equal(t, 1_000, b.events(0))
	require.Equal(t, shapeOf(WorkloadBurst, 0.1).events(0), b.events(0), "the burst is the burst workload's at the same scale")
}

func TestCommitsSince(t *testing.T) {
	t.Parallel()
	c := newCommits()
	t0 := time.Unix(1000, 0)
	require.True(t, c.firstCommit().IsZero())
	c.add([]string{"a", "b"}, t0)
	c.add([]string{"c"}, t0.Add(time.Second))
	c.add([]string{"d"}, t0.Add(2*time.Second))
	require.Equal(t, t0, c.firstCommit())
	require.Equal(t, 2, c.since(t0.Add(time.Second)))
	require.Equal(t, 4, c.since(time.Time{}))
}
