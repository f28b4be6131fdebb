package telemetry

import (
	"fmt"

	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// TemporalInterceptor is Temporal's OpenTelemetry interceptor over tp. Set
// on a client, it traces the client's calls (signal-with-start, starts) and
// every worker built on that client: workflow runs, signals, and activities
// started and run. Spans travel in Temporal's headers, W3C-encoded.
func TemporalInterceptor(tp trace.TracerProvider) (interceptor.Interceptor, error) {
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer: tp.Tracer("go.temporal.io/sdk"),
		// Baggage is the producer's business; Ferry does not carry it
		// through the outbox either.
		DisableBaggage: true,
		// Queries (ferry status, repair) are not part of an event's trace.
		DisableQueryTracing: true,
	})
	if err != nil {
		return nil, fmt.Errorf("Temporal tracing interceptor: %w", err)
	}
	return i, nil
}
