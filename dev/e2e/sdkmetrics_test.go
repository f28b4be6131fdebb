package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/workflows"
)

// metricsURL waits for the /metrics address a Ferry process prints and
// returns its URL.
func metricsURL(t *testing.T, c *child) string {
	t.Helper()
	addr := regexp.MustCompile(`ferry: Prometheus /metrics on http://([0-9.:]+)/metrics`)
	waitFor(t, 60*time.Second, "the /metrics address on the process's output", func() bool { return addr.MatchString(c.out.String()) })
	return "http://" + addr.FindStringSubmatch(c.out.String())[1] + "/metrics"
}

// scrapeFamilies scrapes url and parses the text exposition.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(scrape(t, url)))
	require.NoError(t, err, "the /metrics exposition parses")
	return fams
}

// total adds up a family's samples whose labels include labels: counter
// and gauge values, histogram observation counts.
func total(f *dto.MetricFamily, labels map[string]string) float64 {
	sum := 0.0
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return sum
}

// `ferry run --metrics-address` serves the Temporal SDK's own client and
// worker metrics beside Ferry's, under the SDK's names: once it has
// published events, quarantined a poison one after its retries and been
// sent a repair it rejects, the series an operator of Temporal workers
// watches have samples. The rejected repair counts in ferry_repair_rejected,
// which the workflow emits through the SDK's metrics handler: on /metrics
// only because that handler is wired.
func TestRunServesTemporalSDKMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	c := e.startProcess(t, "run", "FERRY_METRICS_ADDRESS=127.0.0.1:0", "FERRY_POLICY=*:max-attempts=2")
	url := metricsURL(t, c)

	e.commitN(t, 4, 2)
	e.br.Collect(t, 4, time.Minute)
	poison, err := e.commitType(ctx, "P", "poison", false)
	require.NoError(t, err)
	wf := workflows.WorkflowID(e.aggType, "P")
	waitBlocked(t, wf, poison)
	req := workflows.RepairRequest{RequestID: "wrong-class-" + uuid.NewString(), Action: workflows.ActionRetry,
		ExpectErrorClass: activities.ErrTypeTooLarge, Actor: "ops", Reason: "not what blocks it"}
	require.NoError(t, tclient.SignalWorkflow(ctx, wf, "", workflows.RepairSignal, req))
	waitFor(t, 30*time.Second, "the rejection in the memo", func() bool { return memo(t, wf, workflows.MemoRepairRejected) != "" })

	tq := map[string]string{"task_queue": e.taskQueue}
	// Each with samples after that work: what the dashboard and the alert
	// read, and the failures an operator looks for.
	want := []struct {
		name   string
		labels map[string]string
	}{
		{"temporal_request", map[string]string{"operation": "SignalWithStartWorkflowExecution"}},
		{"temporal_long_request", nil},
		{"temporal_workflow_task_queue_poll_succeed", tq},
		{"temporal_workflow_task_schedule_to_start_latency_seconds", tq},
		{"temporal_workflow_task_execution_latency_seconds", tq},
		{"temporal_workflow_completed", tq},
		{"temporal_sticky_cache_hit", tq},
		{"temporal_local_activity_total", tq},
		{"temporal_activity_schedule_to_start_latency_seconds", map[string]string{"activity_type": workflows.PublishEventActivity}},
		{"temporal_activity_execution_failed", map[string]string{"activity_type": workflows.PublishEventActivity}},
		{"temporal_worker_task_slots_available", nil},
		{"temporal_num_pollers", nil},
		{"ferry_repair_rejected", map[string]string{"action": workflows.ActionRetry, "workflow_type": workflows.AggregateWorkflowName}},
	}
	var fams map[string]*dto.MetricFamily
	missing := func() []string {
		fams = scrapeFamilies(t, url)
		var out []string
		for _, w := range want {
			if f := fams[w.name]; f == nil || total(f, w.labels) <= 0 {
				out = append(out, fmt.Sprintf("%s%v", w.name, w.labels))
			}
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	for m := missing(); len(m) > 0; m = missing() {
		if time.Now().After(deadline) {
			var names []string
			for n := range fams {
				if strings.HasPrefix(n, "temporal_") {
					names = append(names, n)
				}
			}
			t.Fatalf("no samples on /metrics for %v; temporal_* families served: %v", m, names)
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Equal(t, 1.0, total(fams["ferry_repair_rejected"], nil), "one rejected repair signal")
	require.Equal(t, dto.MetricType_COUNTER, fams["temporal_request"].GetType())
	require.Equal(t, dto.MetricType_HISTOGRAM, fams["temporal_workflow_task_schedule_to_start_latency_seconds"].GetType())
	require.Contains(t, fams, "ferry_published_total", "Ferry's own series on the same endpoint")
	for n := range fams {
		require.False(t, strings.HasPrefix(n, "otel_") || n == "target_info", "no OTel bookkeeping series: %s", n)
	}
}
