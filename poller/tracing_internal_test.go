package poller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-outbox/ferry/ferrytest"
)

// One ferry.dispatch span per signalled aggregate, continuing the trace of
// the group's lowest traced version and linking the rest; the signal's
// failure (a dead Temporal here) is the span's error.
func TestRunOnceDispatchSpanContinuesRowTraces(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	db := ferrytest.NewDB(t, "")
	p := newPoller(t, db.Pool, Config{Name: "traced", TracerProvider: tp})

	const (
		traceA = "0af7651916cd43dd8448eb211c80319c"
		traceB = "4bf92f3577b34da6a3ce929d0e0e4736"
		traceC = "5c0d9f1e2a3b4c5d6e7f8091a2b3c4d5"
	)
	tp1 := "'00-" + traceA + "-b7ad6b7169203331-01'"
	tp3 := "'00-" + traceB + "-00f067aa0ba902b7-01'"
	tpOther := "'00-" + traceC + "-1111111111111111-01'"
	insertEvent(t, db.Pool, "order", "o-1", map[string]string{"trace_parent": tp1, "trace_state": "'vendor=a'"}) // v1
	insertEvent(t, db.Pool, "order", "o-1", nil)                                                                 // v2, untraced
	id3 := insertEvent(t, db.Pool, "order", "o-1", map[string]string{"trace_parent": tp3})                       // v3
	insertEvent(t, db.Pool, "order", "o-2", map[string]string{"trace_parent": tpOther})
	insertEvent(t, db.Pool, "order", "o-3", nil) // no trace at all: a root span

	_, err := p.RunOnce(context.Background())
	require.Error(t, err, "Temporal is unreachable")

	byAggregate := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		require.Equal(t, "ferry.dispatch", s.Name)
		for _, a := range s.Attributes {
			if a.Key == "ferry.aggregate" {
				byAggregate[a.Value.AsString()] = s
			}
		}
	}
	require.Len(t, byAggregate, 3)

	o1 := byAggregate["order/o-1"]
	require.Equal(t, traceA, o1.SpanContext.TraceID().String(), "continues the lowest version's trace")
	require.Equal(t, "b7ad6b7169203331", o1.Parent.SpanID().String())
	require.True(t, o1.Parent.IsRemote())
	require.Equal(t, "vendor=a", o1.SpanContext.TraceState().String())
	require.Len(t, o1.Links, 1, "v3 is linked; v2 has no trace to link")
	require.Equal(t, traceB, o1.Links[0].SpanContext.TraceID().String())
	require.Contains(t, o1.Links[0].Attributes, attribute.String("messaging.message.id", id3))
	require.Contains(t, o1.Attributes, attribute.Int("messaging.batch.message_count", 3))
	require.Contains(t, o1.Attributes, attribute.String("ferry.poller", "traced"))
	require.Equal(t, codes.Error, o1.Status.Code)
	require.Contains(t, o1.Status.Description, "start ferry/order/o-1", "the failed one-shot start")

	o2 := byAggregate["order/o-2"]
	require.Equal(t, traceC, o2.SpanContext.TraceID().String())
	require.Empty(t, o2.Links)

	o3 := byAggregate["order/o-3"]
	require.False(t, o3.Parent.IsValid(), "no stored trace: a new root")
	require.NotContains(t, []trace.TraceID{o1.SpanContext.TraceID(), o2.SpanContext.TraceID()}, o3.SpanContext.TraceID())
}
