package app

import (
	"cmp"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/cmd/ferry/internal/tracing"
)

// TracingModule provides the process's trace.TracerProvider from the
// tracing.Config in the graph (Config.Telemetry): an OTLP exporter when one is chosen, flushed when the app
// stops (after the poller and worker, whose hooks run first); otherwise the
// global provider. The Temporal client, the poller and the worker take it
// when it is in the graph, and the global provider when it is not.
var TracingModule = fx.Module("ferry.tracing",
	fx.Provide(newTracerProvider),
)

// tracingDeps are Params less the tracer provider it makes.
type tracingDeps struct {
	fx.In

	Lifecycle fx.Lifecycle
	Config    tracing.Config
	Logger    *slog.Logger `optional:"true"`
}

// newTracerProvider builds the tracer provider; fx flushes and stops its
// exporter on stop.
func newTracerProvider(d tracingDeps) (trace.TracerProvider, error) {
	tp, err := tracing.New(d.Config)
	if err != nil {
		return nil, err
	}
	d.Lifecycle.Append(fx.StopHook(tp.Shutdown))
	if tp.Exporting() {
		c, _ := d.Config.WithDefaults()
		cmp.Or(d.Logger, slog.Default()).Info("exporting traces over OTLP", "exporter", c.Exporter,
			"endpoint", cmp.Or(c.Endpoint, "from OTEL_EXPORTER_OTLP_* or localhost"), "service", c.ServiceName)
	}
	return tp, nil
}
