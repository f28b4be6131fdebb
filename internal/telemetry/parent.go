package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// RowContext is the W3C trace context stored with an outbox row
// (trace_parent, trace_state), invalid when the row has none or it does not
// parse.
func RowContext(traceParent, traceState string) trace.SpanContext {
	if traceParent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": traceParent, "tracestate": traceState})
	return trace.SpanContextFromContext(ctx)
}

// PublishParent chooses the parent of the span that publishes an outbox row
// from an activity whose ctx may hold the activity's span (Temporal's
// interceptor puts it there):
//
//   - the activity span, when it belongs to the row's trace: the aggregate
//     workflow was started by this row's dispatch, so producer →
//     ferry.dispatch → workflow → activity → publish is one chain;
//   - otherwise the row's own context, linked to the activity span: a
//     long-lived aggregate workflow was started by an earlier event's trace,
//     and the publish must stay in the trace of the command that wrote this
//     row, not of whichever came first;
//   - the activity span (or nothing) when the row has no trace context.
//
// It returns the context to start the span from and the links to add.
func PublishParent(ctx context.Context, traceParent, traceState string) (context.Context, []trace.Link) {
	row := RowContext(traceParent, traceState)
	cur := trace.SpanContextFromContext(ctx)
	switch {
	case !row.IsValid():
		return ctx, nil
	case !cur.IsValid():
		return trace.ContextWithRemoteSpanContext(ctx, row), nil
	case cur.TraceID() == row.TraceID():
		return ctx, nil
	default:
		return trace.ContextWithRemoteSpanContext(ctx, row), []trace.Link{{SpanContext: cur}}
	}
}
