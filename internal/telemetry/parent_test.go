package telemetry_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-outbox/ferry/internal/telemetry"
)

func spanContext(t *testing.T, traceHex, spanHex string) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex(traceHex)
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex(spanHex)
	require.NoError(t, err)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
}

func TestPublishParent(t *testing.T) {
	t.Parallel()
	const (
		rowTrace   = "0af7651916cd43dd8448eb211c80319c"
		otherTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		rowParent  = "00-" + rowTrace + "-b7ad6b7169203331-01"
	)
	row := spanContext(t, rowTrace, "b7ad6b7169203331")
	sameTrace := spanContext(t, rowTrace, "00f067aa0ba902b7")       // activity span of a workflow this row started
	otherActivity := spanContext(t, otherTrace, "00f067aa0ba902b7") // activity span of an earlier event's trace

	for _, tt := range []struct {
		name        string
		activity    trace.SpanContext // zero: no span in ctx
		traceParent string
		wantParent  trace.SpanContext
		wantLinks   []trace.SpanContext
	}{
		{"activity in the row's trace is the parent", sameTrace, rowParent, sameTrace, nil},
		{"activity in another trace: row is the parent, activity linked", otherActivity, rowParent, row, []trace.SpanContext{otherActivity}},
		{"no activity span: the row", trace.SpanContext{}, rowParent, row, nil},
		{"row without trace context: the activity", otherActivity, "", otherActivity, nil},
		{"row with a malformed trace context: the activity", otherActivity, "00-zz-yy-01", otherActivity, nil},
		{"neither: a root span", trace.SpanContext{}, "", trace.SpanContext{}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tt.activity.IsValid() {
				ctx = trace.ContextWithSpanContext(ctx, tt.activity)
			}
			got, links := telemetry.PublishParent(ctx, tt.traceParent, "vendor=1")
			parent := trace.SpanContextFromContext(got)
			require.Equal(t, tt.wantParent.TraceID(), parent.TraceID())
			require.Equal(t, tt.wantParent.SpanID(), parent.SpanID())
			var gotLinks []trace.SpanContext
			for _, l := range links {
				gotLinks = append(gotLinks, l.SpanContext)
			}
			require.Equal(t, tt.wantLinks, gotLinks)
			if parent.SpanID() == row.SpanID() {
				require.Equal(t, "vendor=1", parent.TraceState().String(), "the row's tracestate travels on")
			}
		})
	}
}

func TestRowContext(t *testing.T) {
	t.Parallel()
	sc := telemetry.RowContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "")
	require.True(t, sc.IsValid())
	require.True(t, sc.IsRemote())
	require.Equal(t, "b7ad6b7169203331", sc.SpanID().String())
	require.False(t, telemetry.RowContext("", "").IsValid())
	require.False(t, telemetry.RowContext("garbage", "").IsValid())
}
