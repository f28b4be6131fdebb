package e2e

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/dev/devserver"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

// serverScrape is one reading of a Temporal server's cost metrics
// (metricActions, metricTransitions): each sample's value by metric name, the namespace it is labelled with and its
// action_type (empty where a metric has none).
type serverScrape map[sampleKey]float64

type sampleKey struct{ name, namespace, actionType string }

// scrapeServer reads the server's cost metrics once.
func scrapeServer(t *testing.T, url string) serverScrape {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	out := serverScrape{}
	for _, name := range []string{metricActions, metricTransitions} {
		for _, m := range fams[name].GetMetric() {
			k := sampleKey{name: name}
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace":
					k.namespace = l.GetValue()
				case "action_type":
					k.actionType = l.GetValue()
				}
			}
			out[k] += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out
}

// since is what each sample moved after an earlier scrape.
func (s serverScrape) since(before serverScrape) serverScrape {
	d := serverScrape{}
	for k, v := range s {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// sum adds up one metric's samples in one namespace. The server's own
// system workflows (namespace temporal-system) start when they please and
// must not count.
func (s serverScrape) sum(name, namespace string) float64 {
	var total float64
	for k, v := range s {
		if k.name == name && k.namespace == namespace {
			total += v
		}
	}
	return total
}

// String lists the samples, sorted, for a log line.
func (s serverScrape) String() string {
	keys := slices.SortedFunc(maps.Keys(s), func(a, b sampleKey) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.actionType, b.actionType))
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %s{namespace=%q", k.name, k.namespace)
		if k.actionType != "" {
			fmt.Fprintf(&b, ",action_type=%q", k.actionType)
		}
		fmt.Fprintf(&b, "} %g", s[k])
	}
	return b.String()
}

// Names as the embedded server's OpenTelemetry Prometheus exporter writes
// them: a counter gets _total; the state-transition histogram is
// dimensionless (_ratio), and one observation (its sample count) is one
// persisted transition.
const (
	metricActions     = "action_total"
	metricTransitions = "state_transition_count_ratio"
)

// A one-event aggregate costs the engine two state transitions and two
// billed actions and starts no timer, read from the server's own metrics
// for the test's namespace:
// an eager one-shot start (create + first workflow task in one
// transition) whose first task publishes and completes the run. Pollers
// apart from the worker (no eager start) and the keep-alive start,
// measured the same way, cost more: the comparison proves the figures can
// tell them apart.
func TestOneEventAggregateCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, metricsURL := costServer(t)
	c := costClient(t, srv)
	// Pollers in a process of their own: the start cannot be eager.
	apart := costClient(t, srv)

	measure := func(t *testing.T, label, mode string, idle time.Duration, pollers client.Client) (transitions, actions float64) {
		e := setup(t)
		e.startFerry(t, ferryOpts{shared: c, temporal: pollers, startMode: mode, idleTimeout: idle})
		// The first workflow of a task queue pays for the queue itself.
		_, err := e.commit(ctx, "warm-up", false)
		require.NoError(t, err)
		require.Len(t, e.br.Collect(t, 1, time.Minute), 1)
		waitClosed(t, c, workflows.WorkflowID(e.aggType, "warm-up"))

		const n = 20
		before := scrapeServer(t, metricsURL)
		for i := range n {
			_, err := e.commit(ctx, aggID(i), false)
			require.NoError(t, err)
		}
		require.Len(t, e.br.Collect(t, n, time.Minute), n)
		for i := range n {
			id := workflows.WorkflowID(e.aggType, aggID(i))
			waitClosed(t, c, id)
			requireNoTimer(t, c, id, mode)
		}
		moved := scrapeServer(t, metricsURL).since(before)
		ns := srv.Namespace()
		transitions, actions = moved.sum(metricTransitions, ns)/n, moved.sum(metricActions, ns)/n
		t.Logf("%s: what moved on the server (only namespace %s counts):%s", label, ns, moved)
		return transitions, actions
	}

	oneShotST, oneShotActions := measure(t, "one-shot", "", 0, nil)
	t.Logf("one-shot: %.2f state transitions, %.2f actions per one-event aggregate", oneShotST, oneShotActions)
	require.LessOrEqual(t, oneShotST, 2.0)
	require.LessOrEqual(t, oneShotActions, 2.0)
	require.Positive(t, oneShotST, "the scrape saw no transitions in the namespace: a metric's name or label is wrong")

	apartST, apartActions := measure(t, "one-shot, pollers apart", "", 0, apart)
	t.Logf("one-shot, pollers apart from the worker: %.2f state transitions, %.2f actions per one-event aggregate", apartST, apartActions)
	require.LessOrEqual(t, apartST, 3.0)
	require.Greater(t, apartST, oneShotST, "not eager, yet as cheap: the figures cannot tell")

	keepST, keepActions := measure(t, "keep-alive", "keep-alive", time.Second, nil)
	t.Logf("keep-alive: %.2f state transitions, %.2f actions per one-event aggregate", keepST, keepActions)
	require.Greater(t, keepST, oneShotST)
	require.Greater(t, keepActions, oneShotActions)
}

// costServer is a Temporal server of the test's own whose metrics only
// its workload moves.
func costServer(t *testing.T) (*devserver.Server, string) {
	t.Helper()
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", freePort(t))
	addr := strings.TrimSuffix(strings.TrimPrefix(metricsURL, "http://"), "/metrics")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devserver.Start(ctx, devserver.Config{Address: "127.0.0.1:0", SearchAttributes: workflows.SearchAttributeTypes, MetricsAddress: addr})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	return srv, metricsURL
}

func costClient(t *testing.T, srv *devserver.Server) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: srv.FrontendAddress(), Namespace: srv.Namespace(), Logger: ferrytest.QuietLogger()})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// waitClosed waits until the workflow's latest run is closed.
func waitClosed(t *testing.T, c client.Client, id string) {
	t.Helper()
	waitFor(t, time.Minute, id+" to close", func() bool {
		d, err := c.DescribeWorkflowExecution(context.Background(), id, "")
		return err == nil && d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
}

// requireNoTimer checks a one-shot run's history for timers (a keep-alive
// run has its idle timer).
func requireNoTimer(t *testing.T, c client.Client, id, mode string) {
	t.Helper()
	timers := 0
	it := c.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if ev.GetEventType() == enumspb.EVENT_TYPE_TIMER_STARTED {
			timers++
		}
	}
	if mode == "keep-alive" {
		require.Positive(t, timers, "%s: a keep-alive run without its idle timer", id)
	} else {
		require.Zero(t, timers, "%s: a one-shot run started a timer", id)
	}
}
