package telemetry

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
)

// sdkMeterName is the instrumentation scope of the Temporal SDK's metrics,
// the name contrib/opentelemetry gives its meter by default.
const sdkMeterName = "temporal-sdk-go"

// SDKLatencyBuckets are the histogram bounds, in seconds, of the Temporal
// SDK's timers (schedule-to-start, execution, request latencies). OTel's
// default bounds (0 to 10,000) are meant for milliseconds; these span a
// millisecond to a long poll's minute.
var SDKLatencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// TemporalMetrics returns a client.MetricsHandler that records the Temporal
// SDK's client and worker metrics (and those a workflow emits through
// workflow.GetMetricsHandler) as Prometheus series on reg, through the
// SDK's OpenTelemetry handler and OTel's Prometheus exporter. Names are the
// SDK's: counters as defined (temporal_request,
// temporal_workflow_task_queue_poll_succeed, no _total), timers as
// histograms in seconds (temporal_workflow_task_schedule_to_start_latency_seconds),
// gauges as defined; the names of Temporal's Go SDK dashboards for
// OpenTelemetry. No target_info or otel_scope_* series or labels.
//
// shutdown stops recording; reg keeps the exporter's collector (Prometheus
// cannot unregister a collector that describes nothing up front), which
// then yields nothing.
func TemporalMetrics(reg prometheus.Registerer) (h client.MetricsHandler, shutdown func(context.Context) error, err error) {
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutCounterSuffixes(),
		otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("temporal SDK metrics: %w", err)
	}
	buckets := sdkmetric.NewView(
		sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Scope: instrumentation.Scope{Name: sdkMeterName}},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: SDKLatencyBuckets}},
	)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithView(buckets))
	h = temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter: mp.Meter(sdkMeterName),
		// Monotonic counters are Prometheus counters; the default
		// up-down counters would be exported as gauges.
		UseMonotonicCounters: true,
		// The default panics; a metric that cannot be recorded must not
		// take a workflow task or a poll down with it: OTel's error
		// handler logs it.
		OnError: otel.Handle,
	})
	return h, mp.Shutdown, nil
}
