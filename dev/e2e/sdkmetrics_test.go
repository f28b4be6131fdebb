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
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/internal/failpoint"
	"github.com/ferry-outbox/ferry/poller"
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
	// One more for an aggregate dispatched within its signal window: a
	// Signal-With-Start for certain (the four above may each have gone
	// out in a one-shot start, when a claim took both of an aggregate's).
	_, err := e.commit(ctx, aggID(0), false)
	require.NoError(t, err)
	e.br.Collect(t, 1, time.Minute)
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
	// A normal run may count refused workflow task completions: a run
	// completing while its aggregate's next signal arrives
	// (TestCompletionRacingASignalIsRetried). Each must be that race; a
	// command the server refuses as invalid (a bad search attribute, memo,
	// child or activity option) fails the task with another cause.
	requireRefusalsAreSignalRaces(t, url, e.taskQueue)
	require.Equal(t, dto.MetricType_COUNTER, fams["temporal_request"].GetType())
	require.Equal(t, dto.MetricType_HISTOGRAM, fams["temporal_workflow_task_schedule_to_start_latency_seconds"].GetType())
	require.Contains(t, fams, "ferry_published_total", "Ferry's own series on the same endpoint")
	for n := range fams {
		require.False(t, strings.HasPrefix(n, "otel_") || n == "target_info", "no OTel bookkeeping series: %s", n)
	}
}

// refusedCompletions reads temporal_request_failure for workflow task
// completions the server answered INVALID_ARGUMENT.
func refusedCompletions(t *testing.T, url string) float64 {
	t.Helper()
	return total(scrapeFamilies(t, url)["temporal_request_failure"],
		map[string]string{"operation": "RespondWorkflowTaskCompleted", "status_code": "INVALID_ARGUMENT"})
}

// taskFailures counts the WorkflowTaskFailed events, by cause, in the
// histories of every run on taskQueue.
func taskFailures(t *testing.T, taskQueue string) map[enumspb.WorkflowTaskFailedCause]int {
	t.Helper()
	ctx := context.Background()
	out := map[enumspb.WorkflowTaskFailedCause]int{}
	var token []byte
	for {
		resp, err := tclient.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, Query: fmt.Sprintf("TaskQueue = '%s'", taskQueue), NextPageToken: token,
		})
		require.NoError(t, err)
		for _, ex := range resp.Executions {
			it := tclient.GetWorkflowHistory(ctx, ex.Execution.WorkflowId, ex.Execution.RunId, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				require.NoError(t, err)
				if a := ev.GetWorkflowTaskFailedEventAttributes(); a != nil {
					out[a.GetCause()]++
				}
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return out
		}
	}
}

// requireRefusalsAreSignalRaces: every completion the process's worker
// saw refused (INVALID_ARGUMENT on /metrics) is a workflow task the server
// failed with cause UNHANDLED_COMMAND, and no task failed otherwise. The
// server records the failure before it answers, so the histories can be
// ahead of the counter for a moment, never behind.
func requireRefusalsAreSignalRaces(t *testing.T, url, taskQueue string) {
	t.Helper()
	var (
		refused  float64
		failures map[enumspb.WorkflowTaskFailedCause]int
	)
	deadline := time.Now().Add(10 * time.Second)
	for {
		refused = refusedCompletions(t, url)
		failures = taskFailures(t, taskQueue)
		if refused == float64(failures[enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND]) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("refused workflow task completions: %v; failed workflow tasks by cause: %v", refused, failures)
	for cause, n := range failures {
		require.Equal(t, enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND, cause, "%d workflow tasks failed with another cause", n)
	}
	require.Equal(t, float64(failures[enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND]), refused,
		"each refused completion (INVALID_ARGUMENT on RespondWorkflowTaskCompleted) is a task failed with UNHANDLED_COMMAND")
}

// A one-shot run completes in the workflow task that published its
// events. When the aggregate's next event is signalled while that task
// runs, the server refuses the completion: it records WorkflowTaskFailed
// with cause UNHANDLED_COMMAND (server v1.32: service/history/api/
// respondworkflowtaskcompleted), answers the worker INVALID_ARGUMENT,
// which the SDK counts in temporal_request_failure{operation=
// "RespondWorkflowTaskCompleted",status_code="INVALID_ARGUMENT"}, and hands
// the signal to a new task of the same run. That is Temporal's guard
// against losing a signal to a completing run, and what a normal run shows
// now and then; a publish stalled after its confirm
// (worker.after-confirm=sleep) makes the race certain here. The new task
// repeats the failed one's local activity, which finds the first event
// published (the cursor) and publishes only the second: each is published
// once, by one run.
func TestCompletionRacingASignalIsRetried(t *testing.T) {
	t.Parallel()
	require.True(t, failpoint.Enabled, "build the e2e tests with -tags failpoints")
	ctx := context.Background()
	e := setup(t)
	c := e.startProcess(t, "run", "FERRY_METRICS_ADDRESS=127.0.0.1:0", failpoint.EnvVar+"=worker.after-confirm=sleep(4s)")
	url := metricsURL(t, c)
	wf := workflows.WorkflowID(e.aggType, "R")

	first, err := e.commit(ctx, "R", false)
	require.NoError(t, err)
	msgs := e.br.Collect(t, 1, time.Minute)
	require.Len(t, msgs, 1)
	require.Equal(t, first, msgs[0].MessageId)
	// Confirmed: the run's first task now stalls before marking it. The
	// next event goes by Signal-With-Start (the aggregate was dispatched
	// within its signal window) into that run.
	second, err := e.commit(ctx, "R", false)
	require.NoError(t, err)
	msgs = e.br.Collect(t, 1, time.Minute)
	require.Len(t, msgs, 1)
	require.Equal(t, second, msgs[0].MessageId)
	_, again := e.br.Get(t, time.Second)
	require.False(t, again, "no event is published twice")

	waitFor(t, 30*time.Second, "the run completed", func() bool {
		d, err := tclient.DescribeWorkflowExecution(ctx, wf, "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	require.Equal(t, 1, measureHistory(t, wf).runs, "the run that was refused took the signal: no second run")
	require.Equal(t, map[enumspb.WorkflowTaskFailedCause]int{enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND: 1}, taskFailures(t, e.taskQueue))
	require.Equal(t, 2, e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = 'R' AND status = 'published'`))

	fams := scrapeFamilies(t, url)
	require.Equal(t, 1.0, total(fams["ferry_relay_dispatches_total"], map[string]string{"how": poller.DispatchStart}))
	require.Equal(t, 1.0, total(fams["ferry_relay_dispatches_total"], map[string]string{"how": poller.DispatchSignal}))
	requireRefusalsAreSignalRaces(t, url, e.taskQueue)
	require.Equal(t, 1.0, refusedCompletions(t, url))
}
