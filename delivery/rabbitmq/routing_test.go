package rabbitmq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
)

func TestRoutingKeyTemplate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tmpl, want, wantErr string
	}{
		{tmpl: rabbitmq.DefaultRoutingKeyTemplate, want: "order.created"},
		{tmpl: "events.{aggregate_type}", want: "events.order"},
		{tmpl: "{event_type}", want: "created"},
		{tmpl: "static", want: "static"},
		{tmpl: "", wantErr: "empty"},
		{tmpl: "{aggregate_type} {event_type}", wantErr: "only {aggregate_type}"},
		{tmpl: "{aggregate_id}", wantErr: "only {aggregate_type}"},
	}
	for _, tt := range tests {
		f, err := rabbitmq.RoutingKeyTemplate(tt.tmpl)
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, "template %q", tt.tmpl)
			continue
		}
		require.NoError(t, err, "template %q", tt.tmpl)
		require.Equal(t, tt.want, f("order", "created"))
	}
	def, err := rabbitmq.RoutingKeyTemplate(rabbitmq.DefaultRoutingKeyTemplate)
	require.NoError(t, err)
	require.Equal(t, rabbitmq.DefaultRoutingKey("a", "b"), def("a", "b"))
}

func TestDefaultRoutingKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "order.placed", rabbitmq.DefaultRoutingKey("order", "placed"))
	require.Equal(t, "a.b.c.d", rabbitmq.DefaultRoutingKey("a.b", "c.d"))
}
