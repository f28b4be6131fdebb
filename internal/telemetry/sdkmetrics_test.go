package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/internal/telemetry"
)

// The SDK's counters, timers and gauges land on the registry under the
// SDK's names, as Prometheus counters, histograms in seconds and gauges,
// with the handler's tags as labels and nothing of OTel's own; after
// shutdown they are gone from the scrape.
func TestTemporalMetricsOnARegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h, shutdown, err := telemetry.TemporalMetrics(reg)
	require.NoError(t, err)
	tagged := h.WithTags(map[string]string{"namespace": "default", "task_queue": "ferry"})
	tagged.Counter("temporal_workflow_task_queue_poll_succeed").Inc(2)
	tagged.Timer("temporal_workflow_task_schedule_to_start_latency").Record(30 * time.Millisecond)
	tagged.Gauge("temporal_sticky_cache_size").Update(3)

	families, err := reg.Gather()
	require.NoError(t, err)
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	require.Len(t, byName, 3, "only the SDK's series: no target_info, no otel_scope_info (got %v)", families)

	poll := byName["temporal_workflow_task_queue_poll_succeed"]
	require.NotNil(t, poll, "the counter under the SDK's name, without _total")
	require.Equal(t, dto.MetricType_COUNTER, poll.GetType())
	require.Equal(t, 2.0, poll.GetMetric()[0].GetCounter().GetValue())
	labels := map[string]string{}
	for _, l := range poll.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	require.Equal(t, map[string]string{"namespace": "default", "task_queue": "ferry"}, labels, "the handler's tags, no otel_scope_* labels")

	lat := byName["temporal_workflow_task_schedule_to_start_latency_seconds"]
	require.NotNil(t, lat, "a timer is a histogram in seconds")
	require.Equal(t, dto.MetricType_HISTOGRAM, lat.GetType())
	hist := lat.GetMetric()[0].GetHistogram()
	require.Equal(t, uint64(1), hist.GetSampleCount())
	require.InDelta(t, 0.03, hist.GetSampleSum(), 1e-9)
	bounds := map[float64]uint64{}
	for _, b := range hist.GetBucket() {
		bounds[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	require.Equal(t, uint64(0), bounds[0.025], "second-scale buckets, not OTel's millisecond defaults")
	require.Equal(t, uint64(1), bounds[0.05])
	require.Len(t, bounds, len(telemetry.SDKLatencyBuckets))

	gauge := byName["temporal_sticky_cache_size"]
	require.NotNil(t, gauge)
	require.Equal(t, dto.MetricType_GAUGE, gauge.GetType())
	require.Equal(t, 3.0, gauge.GetMetric()[0].GetGauge().GetValue())

	require.NoError(t, shutdown(context.Background()))
	families, err = reg.Gather()
	require.NoError(t, err)
	require.Empty(t, families, "nothing recorded after shutdown")
}
