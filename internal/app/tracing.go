package app

import (
	"cmp"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/interceptor"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/internal/telemetry"
)

// TracingModule provides the process's trace.TracerProvider from Config's
// OTel* settings: an OTLP exporter when one is chosen, flushed when the app
// stops (after the poller and worker, whose hooks run first); otherwise the
// global provider. The Temporal client, the poller and the worker take it
// when it is in the graph, and the global provider when it is not.
var TracingModule = fx.Module("ferry.tracing",
	fx.Decorate(withDefaults),
	fx.Provide(newTracerProvider),
)

// tracingDeps are Params less the tracer provider it makes.
type tracingDeps struct {
	fx.In

	Lifecycle fx.Lifecycle
	Config    Config
	Logger    *slog.Logger `optional:"true"`
}

// newTracerProvider builds the tracer provider; fx flushes and stops its
// exporter on stop.
func newTracerProvider(d tracingDeps) (trace.TracerProvider, error) {
	tp, err := telemetry.New(d.Config.telemetry())
	if err != nil {
		return nil, err
	}
	d.Lifecycle.Append(fx.StopHook(tp.Shutdown))
	if tp.Exporting() {
		c, _ := d.Config.telemetry().WithDefaults()
		cmp.Or(d.Logger, slog.Default()).Info("exporting traces over OTLP", "exporter", c.Exporter,
			"endpoint", cmp.Or(c.Endpoint, "from OTEL_EXPORTER_OTLP_* or localhost"), "service", c.ServiceName)
	}
	return tp, nil
}

func (c Config) telemetry() telemetry.Config {
	return telemetry.Config{Exporter: c.OTelExporter, Endpoint: c.OTelEndpoint, ServiceName: c.OTelServiceName}
}

func (p Params) tracerProvider() trace.TracerProvider {
	if p.Tracer == nil {
		return otel.GetTracerProvider()
	}
	return p.Tracer
}

// clientInterceptors puts Temporal's tracing interceptor on the client, so
// that the poller's signal-with-start carries the ferry.dispatch span in its
// header, and every worker built on the client traces workflow runs,
// signals and activities as its descendants.
func clientInterceptors(tp trace.TracerProvider) ([]interceptor.ClientInterceptor, error) {
	i, err := telemetry.TemporalInterceptor(tp)
	if err != nil {
		return nil, err
	}
	return []interceptor.ClientInterceptor{i}, nil
}
