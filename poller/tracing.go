package poller

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// dispatchSpan starts the ferry.dispatch span around one signal-with-start.
// A signal carries the group's rows, each written under its own trace, and
// a span has one parent, so:
//
//   - the parent is the trace context of the group's lowest version, the
//     first event the workflow publishes: when this signal starts the
//     workflow, Temporal's interceptor makes the workflow and its activities
//     descendants of this span, and that event's publish continues the same
//     chain;
//   - every other row with a trace context is linked (the SDK keeps up to
//     128 links per span), with its event id as messaging.message.id.
//
// With Temporal's tracing interceptor on the client, the span's context
// travels in the signal-with-start's header.
func (p *Poller) dispatchSpan(ctx context.Context, g *aggregateGroup, workflowID string) (context.Context, trace.Span) {
	first := -1 // the traced row of the lowest version
	for i, r := range g.rows {
		if rowSpanContext(r).IsValid() && (first < 0 || r.version < g.rows[first].version) {
			first = i
		}
	}
	var links []trace.Link
	for i, r := range g.rows {
		sc := rowSpanContext(r)
		switch {
		case i == first:
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		case sc.IsValid():
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("messaging.message.id", r.id)}})
		}
	}
	return p.tracer.Start(ctx, "ferry.dispatch",
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("ferry.aggregate", g.aggType+"/"+g.aggID),
			attribute.String("ferry.workflow_id", workflowID),
			attribute.String("ferry.poller", p.cfg.Name),
			attribute.Int("messaging.batch.message_count", len(g.rows)),
		))
}

func rowSpanContext(r claimed) trace.SpanContext {
	if r.traceParent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": r.traceParent, "tracestate": r.traceState})
	return trace.SpanContextFromContext(ctx)
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
