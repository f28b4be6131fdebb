package activities_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/activities"
)

func TestRoutingKeyTemplate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tmpl, want, wantErr string
	}{
		{tmpl: activities.DefaultRoutingKeyTemplate, want: "order.created"},
		{tmpl: "events.{aggregate_type}", want: "events.order"},
		{tmpl: "{event_type}", want: "created"},
		{tmpl: "static", want: "static"},
		{tmpl: "", wantErr: "empty"},
		{tmpl: "{aggregate_type} {event_type}", wantErr: "only {aggregate_type}"},
		{tmpl: "{aggregate_id}", wantErr: "only {aggregate_type}"},
	}
	for _, tt := range tests {
		f, err := activities.RoutingKeyTemplate(tt.tmpl)
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, "template %q", tt.tmpl)
			continue
		}
		require.NoError(t, err, "template %q", tt.tmpl)
		require.Equal(t, tt.want, f("order", "created"))
	}
	def, err := activities.RoutingKeyTemplate(activities.DefaultRoutingKeyTemplate)
	require.NoError(t, err)
	require.Equal(t, activities.DefaultRoutingKey("a", "b"), def("a", "b"))
}
