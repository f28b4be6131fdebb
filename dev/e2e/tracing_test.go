package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-outbox/ferry/consumer"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// One trace runs from the producer's span through the poller's dispatch,
// the aggregate workflow and its publish activity (Temporal's interceptor),
// Ferry's publish, to the consumer's span (in-memory exporter), each span
// the child of the one before. A second event of the same aggregate, written
// under another trace and signalled with the first, keeps its own trace for
// its publish and consume, and the dispatch links to it.
func TestTraceRunsFromProducerToConsumer(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	e := setup(t)
	// A short idle timeout ends the workflow, and with it its run span.
	e.startFerry(t, ferryOpts{tracer: tp, idleTimeout: time.Second})
	ctx := context.Background()
	_, err := inbox.Migrate(ctx, e.db.Pool, nil)
	require.NoError(t, err)
	in, err := inbox.New(inbox.Config{Pool: e.db.Pool, Consumer: "tracing"})
	require.NoError(t, err)
	var applied atomic.Int64
	queue := ferrytest.Name("trace.q")
	// Registered first, so it runs after the consumer stopped.
	t.Cleanup(func() { deleteConsumerQueues(t, e.br.URL, queue) })
	c, err := consumer.New(consumer.Config{
		URL: e.br.URL, Queue: queue, Exchange: e.br.Exchange, Bindings: []string{"#"},
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

	// Two commands, two traces, one transaction: both rows are claimed and
	// signalled together, v1 (placed) first.
	placedCtx, placedSpan := tp.Tracer("test").Start(ctx, "POST /orders")
	paidCtx, paidSpan := tp.Tracer("test").Start(ctx, "POST /payments")
	paidID := uuid.Must(uuid.NewV7())
	require.NoError(t, pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
		for _, ev := range []struct {
			ctx context.Context
			id  uuid.UUID
			typ string
		}{{placedCtx, uuid.Must(uuid.NewV7()), "placed"}, {paidCtx, paidID, "paid"}} {
			payload, _ := json.Marshal(map[string]string{"order": "t"})
			if _, err := e.writer.Write(ev.ctx, tx, outbox.Event{ID: ev.id, AggregateType: e.aggType, AggregateID: "t", EventType: ev.typ, Payload: payload}); err != nil {
				return err
			}
		}
		return nil
	}))
	placedSpan.End()
	paidSpan.End()

	waitFor(t, time.Minute, "the consumer to apply both events", func() bool { return applied.Load() == 2 })
	c.Stop() // ends the consumer spans
	waitFor(t, time.Minute, "the idle workflow to end its run span", func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == "RunWorkflow:"+workflows.AggregateWorkflowName && s.SpanContext.TraceID() == placedSpan.SpanContext().TraceID() {
				return true
			}
		}
		return false
	})

	// Each span is the one child of the one before it with its name, in
	// the first command's trace.
	spans := exp.GetSpans()
	placedRoot := placedSpan.SpanContext()
	child := func(parent trace.SpanContext, name string) tracetest.SpanStub {
		t.Helper()
		got := children(spans, parent, name)
		require.Len(t, got, 1, "one %q under %s; got %v", name, parent.SpanID(), names(spans))
		return got[0]
	}
	dispatch := child(placedRoot, "ferry.dispatch")
	// A new aggregate: a one-shot start with the events in its input.
	start := child(dispatch.SpanContext, "StartWorkflow:"+workflows.AggregateWorkflowName)
	run := child(start.SpanContext, "RunWorkflow:"+workflows.AggregateWorkflowName)
	// On the fast path (the default) a local activity publishes the events
	// in order, placed in the first one.
	starts := children(spans, run.SpanContext, "StartActivity:"+workflows.PublishBatchActivity)
	require.NotEmpty(t, starts, "a publish activity; got %v", names(spans))
	slices.SortFunc(starts, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	activity := child(starts[0].SpanContext, "RunActivity:"+workflows.PublishBatchActivity)

	// The publish span's parent is the publish activity's span: this
	// event's dispatch started the workflow, so it is in this trace
	// (telemetry.PublishParent).
	publishPlaced := "ferry.publish " + e.aggType + ".placed"
	publish := children(spans, activity.SpanContext, publishPlaced)
	require.Len(t, publish, 1, "publish is a child of the publish activity's span; got %v", names(spans))
	consume := child(publish[0].SpanContext, "ferry.consume placed")
	require.Equal(t, trace.SpanKindProducer, publish[0].SpanKind)
	require.Equal(t, trace.SpanKindConsumer, consume.SpanKind)

	// The dispatch carried both rows: it links the second command's span.
	require.Len(t, dispatch.Links, 1)
	require.Equal(t, paidSpan.SpanContext().SpanID(), dispatch.Links[0].SpanContext.SpanID())
	require.Contains(t, dispatch.Links[0].Attributes, attribute.String("messaging.message.id", paidID.String()))

	// The second event's publish and consume stay in its own trace, linked
	// to the activity that published it.
	publishPaid := child(paidSpan.SpanContext(), "ferry.publish "+e.aggType+".paid")
	require.Len(t, publishPaid.Links, 1)
	require.Equal(t, activity.SpanContext.SpanID(), publishPaid.Links[0].SpanContext.SpanID())
	child(publishPaid.SpanContext, "ferry.consume paid")
}

// children returns the spans named name whose parent is parent.
func children(spans tracetest.SpanStubs, parent trace.SpanContext, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name && s.Parent.TraceID() == parent.TraceID() && s.Parent.SpanID() == parent.SpanID() {
			out = append(out, s)
		}
	}
	return out
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name+" ("+s.SpanContext.SpanID().String()+" ← "+s.Parent.SpanID().String()+")")
	}
	return out
}
