package bench

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// scrapeText is a Temporal server's /metrics in the shape the
// OpenTelemetry exporter writes it, cut down to the families the bench
// reads (and one it does not), with counts the caller picks.
func scrapeText(transitions []int, actions map[string]int, visStarted, storeCalls int, latency []int) string {
	var b strings.Builder
	b.WriteString("# HELP action_total \n# TYPE action_total counter\n")
	for _, t := range []string{"grpc_SignalWithStartWorkflowExecution", "command_ScheduleActivityTask", "command_RecordMarker", "command_BatchMarkers"} {
		if n, ok := actions[t]; ok {
			fmt.Fprintf(&b, "action_total{action_type=%q,namespace=\"default\",operation=\"x\",otel_scope_name=\"temporal\",otel_scope_version=\"\",service_name=\"frontend\"} %d\n", t, n)
		}
	}
	// The system namespace's actions are not the bench's.
	b.WriteString("action_total{action_type=\"grpc_StartWorkflowExecution\",namespace=\"temporal-system\",operation=\"StartWorkflowExecution\",otel_scope_name=\"temporal\",otel_scope_version=\"\",service_name=\"frontend\"} 7\n")

	// transitions[i]: observations with a running count of bound i, of
	// bounds 1, 2, 5.
	b.WriteString("# HELP state_transition_count_ratio \n# TYPE state_transition_count_ratio histogram\n")
	bounds := []float64{1, 2, 5}
	cum, sum := 0, 0.0
	for i, n := range transitions {
		cum += n
		sum += float64(n) * bounds[i]
		fmt.Fprintf(&b, "state_transition_count_ratio_bucket{namespace=\"default\",namespace_state=\"active\",operation=\"WorkflowContext\",service_name=\"history\",le=\"%g\"} %d\n", bounds[i], cum)
	}
	fmt.Fprintf(&b, "state_transition_count_ratio_bucket{namespace=\"default\",namespace_state=\"active\",operation=\"WorkflowContext\",service_name=\"history\",le=\"+Inf\"} %d\n", cum)
	fmt.Fprintf(&b, "state_transition_count_ratio_sum{namespace=\"default\",namespace_state=\"active\",operation=\"WorkflowContext\",service_name=\"history\"} %g\n", sum)
	fmt.Fprintf(&b, "state_transition_count_ratio_count{namespace=\"default\",namespace_state=\"active\",operation=\"WorkflowContext\",service_name=\"history\"} %d\n", cum)
	b.WriteString("state_transition_count_ratio_bucket{namespace=\"temporal-system\",namespace_state=\"active\",operation=\"WorkflowContext\",service_name=\"history\",le=\"1\"} 2\n")
	b.WriteString("state_transition_count_ratio_bucket{namespace=\"temporal-system\",namespace_state=\"active\",operation=\"WorkflowContext\",service_name=\"history\",le=\"+Inf\"} 2\n")
	b.WriteString("state_transition_count_ratio_sum{namespace=\"temporal-system\",namespace_state=\"active\",operation=\"WorkflowContext\",service_name=\"history\"} 2\n")
	b.WriteString("state_transition_count_ratio_count{namespace=\"temporal-system\",namespace_state=\"active\",operation=\"WorkflowContext\",service_name=\"history\"} 2\n")

	b.WriteString("# HELP visibility_persistence_requests_total \n# TYPE visibility_persistence_requests_total counter\n")
	fmt.Fprintf(&b, "visibility_persistence_requests_total{operation=\"RecordWorkflowExecutionStarted\",service_name=\"history\",visibility_plugin_name=\"sqlite\"} %d\n", visStarted)
	b.WriteString("visibility_persistence_requests_total{operation=\"ListWorkflowExecutions\",service_name=\"frontend\",visibility_plugin_name=\"sqlite\"} 40\n")

	b.WriteString("# HELP persistence_requests_total Persistence requests, keyed by `operation`\n# TYPE persistence_requests_total counter\n")
	fmt.Fprintf(&b, "persistence_requests_total{namespace=\"default\",operation=\"UpdateWorkflowExecution\",service_name=\"history\"} %d\n", storeCalls)
	b.WriteString("persistence_requests_total{namespace=\"system\",operation=\"ListNamespaces\",service_name=\"frontend\"} 23\n")

	// latency[i]: calls in the buckets ≤ 1, ≤ 2, ≤ 5, ≤ 10 ms.
	b.WriteString("# HELP persistence_latency_milliseconds Persistence latency, keyed by `operation`\n# TYPE persistence_latency_milliseconds histogram\n")
	cum, sum = 0, 0
	for i, n := range latency {
		cum += n
		sum += float64(n) * []float64{0.5, 1.5, 3, 8}[i]
		fmt.Fprintf(&b, "persistence_latency_milliseconds_bucket{namespace=\"default\",operation=\"UpdateWorkflowExecution\",le=\"%g\"} %d\n", []float64{1, 2, 5, 10}[i], cum)
	}
	fmt.Fprintf(&b, "persistence_latency_milliseconds_bucket{namespace=\"default\",operation=\"UpdateWorkflowExecution\",le=\"+Inf\"} %d\n", cum)
	fmt.Fprintf(&b, "persistence_latency_milliseconds_sum{namespace=\"default\",operation=\"UpdateWorkflowExecution\"} %g\n", sum)
	fmt.Fprintf(&b, "persistence_latency_milliseconds_count{namespace=\"default\",operation=\"UpdateWorkflowExecution\"} %d\n", cum)
	b.WriteString("# HELP target_info Target metadata\n# TYPE target_info gauge\ntarget_info{service_name=\"ferry-bench-temporal\"} 1\n")
	return b.String()
}

func parse(t *testing.T, text string) serverMetrics {
	t.Helper()
	m, err := parseServerMetrics(strings.NewReader(text))
	require.NoError(t, err)
	return m
}

func TestServerCostIsTheDifferenceOfTwoScrapes(t *testing.T) {
	t.Parallel()
	before := parse(t, scrapeText([]int{2, 1, 0}, map[string]int{"grpc_SignalWithStartWorkflowExecution": 2}, 1, 10, []int{10, 0, 0, 0}))
	// 100 runs created, each written 3 times more (running counts 1, 2,
	// then 3 in the ≤ 5 bucket): 300 transitions.
	after := parse(t, scrapeText([]int{102, 101, 100},
		map[string]int{"grpc_SignalWithStartWorkflowExecution": 102, "command_ScheduleActivityTask": 100, "command_RecordMarker": 250, "command_BatchMarkers": 100},
		101, 1010, []int{10 + 900, 50, 40, 10}))
	c := serverCost(before, after, "default")
	require.Equal(t, 300.0, c.StateTransitions)
	require.Equal(t, 100.0, c.RunsStarted)
	require.Equal(t, 300.0, c.Actions, "per-marker actions are left out: the batch counts once per workflow task")
	require.Equal(t, map[string]float64{"grpc_SignalWithStartWorkflowExecution": 100, "command_ScheduleActivityTask": 100, "command_RecordMarker": 250, "command_BatchMarkers": 100}, c.ActionTypes)
	require.Equal(t, 100.0, c.VisibilityWrites, "reads (ListWorkflowExecutions) are not writes")
	require.Equal(t, map[string]float64{"RecordWorkflowExecutionStarted": 100}, c.VisibilityByOperation)
	require.Equal(t, 1000.0, c.PersistenceRequests)
	// 1000 calls: 900 ≤ 1ms, 50 ≤ 2ms, 40 ≤ 5ms, 10 ≤ 10ms; the 990th is the
	// last of the ≤ 5ms bucket.
	require.Equal(t, 5*time.Millisecond, c.PersistenceP99)
	require.InDelta(t, float64(msDuration((900*0.5+50*1.5+40*3+10*8)/1000.0)), float64(c.PersistenceMean), float64(time.Microsecond))
	require.Zero(t, c.RunsCompleted, "a counter never counted is absent: 0")
}

func TestHistogramQuantileInterpolatesWithinTheBucket(t *testing.T) {
	t.Parallel()
	h := histogram{Count: 100, Bounds: []float64{10, 20, 50}, Cumulative: []float64{50, 90, 100}}
	require.InDelta(t, 10, h.quantile(0.5), 1e-9)
	require.InDelta(t, 15, h.quantile(0.7), 1e-9, "halfway through the ≤ 20 bucket")
	require.InDelta(t, 35, h.quantile(0.95), 1e-9)
	require.InDelta(t, 5, h.quantile(0.25), 1e-9, "the lowest bucket starts at 0")
	over := histogram{Count: 10, Bounds: []float64{10}, Cumulative: []float64{5}}
	require.Equal(t, 10.0, over.quantile(0.99), "above the highest bound: that bound")
	require.True(t, math.IsNaN(histogram{}.quantile(0.99)))
	require.Equal(t, 50.0, h.atMost(10))
	require.Zero(t, h.atMost(11), "not a bound")
}

func TestHistogramMinusAnEarlierReadingWithFewerBuckets(t *testing.T) {
	t.Parallel()
	earlier := histogram{Count: 3, Sum: 3, Bounds: []float64{1}, Cumulative: []float64{3}}
	later := histogram{Count: 5, Sum: 9, Bounds: []float64{1, 5}, Cumulative: []float64{4, 5}}
	require.Equal(t, histogram{Count: 2, Sum: 6, Bounds: []float64{1, 5}, Cumulative: []float64{1, 5}}, later.minus(earlier))
}

func TestFamilyFindsTheExportersSpellings(t *testing.T) {
	t.Parallel()
	m := parse(t, scrapeText([]int{1, 0, 0}, map[string]int{"command_BatchMarkers": 1}, 0, 0, []int{1, 0, 0, 0}))
	for _, base := range []string{metricActions, metricStateTransitions, metricPersistenceLatency, metricPersistenceRequests, metricVisibilityRequests} {
		require.NotNil(t, m.family(base), base)
	}
	require.Nil(t, m.family(metricWorkflowSuccess))
	require.Equal(t, 1.0, m.histogram(metricStateTransitions, inNamespace("default")).Count)
	require.Equal(t, 3.0, m.histogram(metricStateTransitions, nil).Count, "every namespace")
	_, err := parseServerMetrics(strings.NewReader("not metrics {"))
	require.Error(t, err)
}

func TestIdleNeedsQuietCPUAndNoWork(t *testing.T) {
	t.Parallel()
	a := serverActivity{transitions: 100, requests: 1000}
	quiet := measureBusyness(a, a, 20*time.Millisecond, time.Second, 1100*time.Millisecond)
	require.True(t, quiet.idle(), "2%% CPU, nothing done: %s", quiet)
	require.False(t, measureBusyness(a, a, 80*time.Millisecond, time.Second, time.Second).idle(), "8% CPU")
	busy := measureBusyness(a, serverActivity{transitions: 1300, requests: 1000}, 0, time.Second, 2*time.Second)
	require.False(t, busy.idle(), "transitions while the CPU looked quiet")
	require.Equal(t, "0% CPU, 600 state transitions/s, 0 store requests/s", busy.String())
	require.False(t, measureBusyness(a, serverActivity{transitions: 100, requests: 1001}, 0, time.Second, time.Second).idle(), "one store call")
}
