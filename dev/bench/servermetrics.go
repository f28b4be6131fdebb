package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// The Temporal server's own metrics the bench reads, by their names in
// go.temporal.io/server common/metrics/metric_defs.go. OpenTelemetry's
// Prometheus exporter adds _total to counters and the unit to histograms
// (persistence_latency_milliseconds, state_transition_count_ratio);
// serverMetrics.family finds any of these spellings.
const (
	// metricStateTransitions is a histogram observed once per persisted
	// mutable-state write of a run (workflow/context.go,
	// emitStateTransitionCount) with the run's running count of state
	// transitions as the value: its _count is the number of transitions,
	// its lowest bucket (≤ 1) the number of runs created, and its _sum a
	// sum of running totals that means nothing on its own.
	metricStateTransitions = "state_transition_count"
	// metricActions counts what Temporal Cloud bills, by action_type, in the
	// frontend (rpc/interceptor/telemetry.go).
	metricActions = "action"
	// metricVisibilityRequests counts visibility store calls by operation.
	metricVisibilityRequests = "visibility_persistence_requests"
	// metricPersistenceRequests and metricPersistenceLatency cover every call
	// to the execution, task and metadata stores, by operation.
	metricPersistenceRequests = "persistence_requests"
	metricPersistenceLatency  = "persistence_latency"
	// metricWorkflowSuccess counts runs completed, once the completion is
	// persisted (workflow/transaction_impl.go).
	metricWorkflowSuccess = "workflow_success"
	// metricEagerExecution counts starts whose first workflow task went back
	// in the start's response (eager start).
	metricEagerExecution = "workflow_eager_execution"
)

// markerAction is the action type the server counts once per RecordMarker
// command. It also counts command_BatchMarkers once per workflow task that
// has markers, and notes (telemetry.go) that a pricing model counts one
// or the other: Temporal Cloud bills a workflow task's local activities as
// one action, so billedActions leaves the per-marker count out.
const markerAction = "command_RecordMarker"

// visibilityWrites are the visibility operations that write a row: a run
// started, its search attributes or memo changed, it closed.
var visibilityWrites = []string{"RecordWorkflowExecutionStarted", "UpsertWorkflowExecution", "RecordWorkflowExecutionClosed"}

// serverMetrics is one scrape of the server's /metrics, by family name.
type serverMetrics map[string]*dto.MetricFamily

// parseServerMetrics reads the Prometheus text format.
func parseServerMetrics(r io.Reader) (serverMetrics, error) {
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse Temporal server metrics: %w", err)
	}
	return fams, nil
}

// scrapeServer reads the server's /metrics once.
func scrapeServer(ctx context.Context, url string) (serverMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape Temporal server metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape Temporal server metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape Temporal server metrics at %s: %s", url, resp.Status)
	}
	return parseServerMetrics(resp.Body)
}

// scrapeTemporal reads the /metrics of every process of the bench's
// Temporal server and sums them: the samples of one family from several
// processes are kept side by side, and every reading below sums samples.
func (r *runner) scrapeTemporal(ctx context.Context) (serverMetrics, error) {
	sum := serverMetrics{}
	for _, url := range r.temporalMetrics {
		m, err := scrapeServer(ctx, url)
		if err != nil {
			return nil, err
		}
		for name, f := range m {
			if into, ok := sum[name]; ok {
				into.Metric = append(into.Metric, f.Metric...)
			} else {
				sum[name] = f
			}
		}
	}
	return sum, nil
}

// family finds a metric by its name in the server's code, whatever
// suffixes the exporter added. Nil when absent: a counter appears only once
// it was first counted.
func (m serverMetrics) family(base string) *dto.MetricFamily {
	for _, name := range []string{base, base + "_total", base + "_milliseconds", base + "_ratio"} {
		if f, ok := m[name]; ok {
			return f
		}
	}
	return nil
}

// labelSet is a sample's labels; a filter keeps or drops a sample by them.
type labelSet map[string]string

func labelsOf(s *dto.Metric) labelSet {
	out := make(labelSet, len(s.GetLabel()))
	for _, l := range s.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// inNamespace keeps the samples of one namespace.
func inNamespace(ns string) func(labelSet) bool {
	return func(l labelSet) bool { return l["namespace"] == ns }
}

// byLabel sums a counter's samples kept by keep (nil: all) per value of
// label.
func (m serverMetrics) byLabel(base, label string, keep func(labelSet) bool) map[string]float64 {
	out := map[string]float64{}
	f := m.family(base)
	if f == nil {
		return out
	}
	for _, s := range f.GetMetric() {
		l := labelsOf(s)
		if keep != nil && !keep(l) {
			continue
		}
		out[l[label]] += s.GetCounter().GetValue() + s.GetUntyped().GetValue()
	}
	return out
}

// total sums a counter's samples kept by keep (nil: all).
func (m serverMetrics) total(base string, keep func(labelSet) bool) float64 {
	var sum float64
	for _, v := range m.byLabel(base, "", keep) {
		sum += v
	}
	return sum
}

// histogram is a histogram summed over its label sets: Bounds are the
// buckets' upper bounds (+Inf left out), Cumulative the observations at
// or below each.
type histogram struct {
	Count, Sum float64
	Bounds     []float64
	Cumulative []float64
}

// histogram sums a histogram's samples kept by keep (nil: all). Every label
// set of one histogram has the same buckets (the server sets them per
// unit).
func (m serverMetrics) histogram(base string, keep func(labelSet) bool) histogram {
	var h histogram
	f := m.family(base)
	if f == nil {
		return h
	}
	byBound := map[float64]float64{}
	for _, s := range f.GetMetric() {
		if keep != nil && !keep(labelsOf(s)) {
			continue
		}
		hs := s.GetHistogram()
		h.Count += float64(hs.GetSampleCount())
		h.Sum += hs.GetSampleSum()
		for _, b := range hs.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), +1) {
				byBound[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
	}
	h.Bounds = slices.Sorted(maps.Keys(byBound))
	for _, b := range h.Bounds {
		h.Cumulative = append(h.Cumulative, byBound[b])
	}
	return h
}

// minus is what was observed between an earlier reading and h. A bucket
// the earlier reading lacks (no observation in it yet) counts as 0.
func (h histogram) minus(earlier histogram) histogram {
	out := histogram{Count: h.Count - earlier.Count, Sum: h.Sum - earlier.Sum, Bounds: h.Bounds}
	for i, b := range h.Bounds {
		c := h.Cumulative[i]
		if j := slices.Index(earlier.Bounds, b); j >= 0 {
			c -= earlier.Cumulative[j]
		}
		out.Cumulative = append(out.Cumulative, c)
	}
	return out
}

// atMost is the number of observations at or below bound, which must be
// one of the bounds; 0 otherwise.
func (h histogram) atMost(bound float64) float64 {
	if i := slices.Index(h.Bounds, bound); i >= 0 {
		return h.Cumulative[i]
	}
	return 0
}

// quantile estimates the q-quantile (0 < q < 1) as Prometheus'
// histogram_quantile does: linearly within the bucket that holds it, the
// lowest bucket starting at 0. Above the highest bound it is that bound.
// NaN without observations.
func (h histogram) quantile(q float64) float64 {
	if h.Count <= 0 {
		return math.NaN()
	}
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for i, upper := range h.Bounds {
		c := h.Cumulative[i]
		if c < rank {
			lower, below = upper, c
			continue
		}
		if c == below {
			return upper
		}
		return lower + (upper-lower)*(rank-below)/(c-below)
	}
	return lower
}

// ServerCost is what the Temporal server counted of its own work over one
// measured run: the difference of two scrapes of its /metrics, one just
// before the run, one after it went idle again. Counts are of the bench's
// namespace, except the persistence figures, which are the whole server's.
type ServerCost struct {
	// Seconds between the two scrapes.
	Seconds float64 `json:"seconds"`
	// StateTransitions are mutable-state writes of workflow runs (what a
	// history host's capacity is quoted in).
	StateTransitions float64 `json:"state_transitions"`
	// Actions are what Temporal Cloud bills (local activities of one
	// workflow task count once); ActionTypes has the server's counts by
	// type, the per-marker one included.
	Actions     float64            `json:"billed_actions"`
	ActionTypes map[string]float64 `json:"action_types,omitempty"`
	// VisibilityWrites are visibility rows written: started, upserted,
	// closed (VisibilityByOperation).
	VisibilityWrites      float64            `json:"visibility_writes"`
	VisibilityByOperation map[string]float64 `json:"visibility_writes_by_operation,omitempty"`
	// RunsStarted are workflow runs created (starts, continue-as-new);
	// RunsCompleted runs that completed (not failed or terminated).
	RunsStarted   float64 `json:"runs_started"`
	RunsCompleted float64 `json:"runs_completed"`
	// EagerStarts are starts whose first workflow task the server handed
	// back in the start's response.
	EagerStarts float64 `json:"eager_starts,omitempty"`
	// PersistenceRequests, and their latency's mean and p99 (estimated
	// from the server's buckets), over every store call of the server.
	PersistenceRequests float64       `json:"persistence_requests"`
	PersistenceMean     time.Duration `json:"persistence_latency_mean_ns"`
	PersistenceP99      time.Duration `json:"persistence_latency_p99_ns"`
}

// serverCost is what the server counted in namespace ns between two
// scrapes.
func serverCost(before, after serverMetrics, ns string) ServerCost {
	keep := inNamespace(ns)
	tr := after.histogram(metricStateTransitions, keep).minus(before.histogram(metricStateTransitions, keep))
	c := ServerCost{
		StateTransitions: tr.Count,
		// A run's first write is its creation, with a running count of 1.
		RunsStarted:         tr.atMost(1),
		RunsCompleted:       after.total(metricWorkflowSuccess, keep) - before.total(metricWorkflowSuccess, keep),
		EagerStarts:         after.total(metricEagerExecution, keep) - before.total(metricEagerExecution, keep),
		ActionTypes:         counterDelta(before.byLabel(metricActions, "action_type", keep), after.byLabel(metricActions, "action_type", keep)),
		PersistenceRequests: after.total(metricPersistenceRequests, nil) - before.total(metricPersistenceRequests, nil),
	}
	for t, n := range c.ActionTypes {
		if t != markerAction {
			c.Actions += n
		}
	}
	vis := counterDelta(before.byLabel(metricVisibilityRequests, "operation", nil), after.byLabel(metricVisibilityRequests, "operation", nil))
	c.VisibilityByOperation = map[string]float64{}
	for _, op := range visibilityWrites {
		if n := vis[op]; n > 0 {
			c.VisibilityByOperation[op] = n
			c.VisibilityWrites += n
		}
	}
	lat := after.histogram(metricPersistenceLatency, nil).minus(before.histogram(metricPersistenceLatency, nil))
	if lat.Count > 0 {
		c.PersistenceMean = msDuration(lat.Sum / lat.Count)
		c.PersistenceP99 = msDuration(lat.quantile(0.99))
	}
	return c
}

// counterDelta is after − before per key, keys that did not change left
// out.
func counterDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// msDuration converts the server's timer unit, milliseconds.
func msDuration(ms float64) time.Duration {
	return time.Duration(ms * float64(time.Millisecond))
}

// metricsURL is where a server started with MetricsAddress addr serves.
func metricsURL(addr string) string {
	return "http://" + addr + "/metrics"
}

// metricsReading is one scrape and when it was taken.
type metricsReading struct {
	at time.Time
	m  serverMetrics
}

// scrapeCost reads the server's metrics at the start of a measured run.
// A failed scrape costs the run its server figures, not the bench: nil,
// and it says why.
func (r *runner) scrapeCost(ctx context.Context) *metricsReading {
	m, err := r.scrapeTemporal(ctx)
	if err != nil {
		r.progress.say("this run has no server cost: %v", err)
		return nil
	}
	return &metricsReading{at: time.Now(), m: m}
}

// costSince is what the server counted since before; nil without a
// reading on either side.
func (r *runner) costSince(ctx context.Context, before *metricsReading) *ServerCost {
	if before == nil {
		return nil
	}
	after := r.scrapeCost(ctx)
	if after == nil {
		return nil
	}
	c := serverCost(before.m, after.m, namespace)
	c.Seconds = after.at.Sub(before.at).Seconds()
	return &c
}
