package e2e

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-outbox/ferry/consumer"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/internal/testenv"
	"github.com/ferry-outbox/ferry/outbox"
)

// One trace runs from the producer's span through Ferry's publish to the
// consumer's span (in-memory exporter).
func TestTraceRunsFromProducerToConsumer(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	e := setup(t)
	e.startFerry(t, ferryOpts{tracer: tp})
	ctx := context.Background()
	_, err := inbox.Migrate(ctx, e.db.Pool, nil)
	require.NoError(t, err)
	in, err := inbox.New(inbox.Config{Pool: e.db.Pool, Consumer: "tracing"})
	require.NoError(t, err)
	var applied atomic.Int64
	c, err := consumer.New(consumer.Config{
		URL: e.br.URL, Queue: testenv.Name("trace.q"), Exchange: e.br.Exchange, Bindings: []string{"#"},
		Inbox: in, TracerProvider: tp,
		Handler: func(ctx context.Context, _ pgx.Tx, _ inbox.Event) error {
			require.True(t, trace.SpanContextFromContext(ctx).IsValid(), "the handler runs inside the consumer span")
			applied.Add(1)
			return nil
		},
	})
	require.NoError(t, err)
	require.NoError(t, c.Declare(ctx)) // bound before anything is published
	require.NoError(t, c.Start(ctx))
	t.Cleanup(c.Stop)

	pctx, root := tp.Tracer("test").Start(ctx, "POST /orders")
	id := uuid.Must(uuid.NewV7())
	require.NoError(t, pgx.BeginFunc(pctx, e.db.Pool, func(tx pgx.Tx) error {
		payload, _ := json.Marshal(map[string]string{"order": id.String()})
		_, err := e.writer.Write(pctx, tx, outbox.Event{ID: id, AggregateType: e.aggType, AggregateID: "t", EventType: "placed", Payload: payload})
		return err
	}))
	root.End()

	waitFor(t, time.Minute, "the consumer to apply the event", func() bool { return applied.Load() == 1 })
	c.Stop() // ends the consumer span
	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
	}
	publish, ok := byName["ferry.publish "+e.aggType+".placed"]
	require.True(t, ok, "a publish span; got %v", names(exp.GetSpans()))
	consume, ok := byName["ferry.consume placed"]
	require.True(t, ok, "a consume span; got %v", names(exp.GetSpans()))
	rootSC := root.SpanContext()
	require.Equal(t, rootSC.TraceID(), publish.SpanContext.TraceID(), "publish continues the producer's trace")
	require.Equal(t, rootSC.SpanID(), publish.Parent.SpanID(), "publish is a child of the producer's span")
	require.Equal(t, rootSC.TraceID(), consume.SpanContext.TraceID())
	require.Equal(t, publish.SpanContext.SpanID(), consume.Parent.SpanID(), "consume is a child of publish")
	require.Equal(t, trace.SpanKindProducer, publish.SpanKind)
	require.Equal(t, trace.SpanKindConsumer, consume.SpanKind)
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
