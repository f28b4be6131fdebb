package upcast_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/upcast"
)

func appendTag(tag string) upcast.Func {
	return func(p []byte) ([]byte, error) { return append(bytes.Clone(p), tag...), nil }
}

func TestUpcast(t *testing.T) {
	t.Parallel()
	r := upcast.NewRegistry()
	require.NoError(t, r.Register("created", 3,
		upcast.Step{From: 1, Fn: appendTag("+2")},
		upcast.Step{From: 2, Fn: appendTag("+3")}))
	require.NoError(t, r.Register("paid", 3, upcast.Step{From: 2, Fn: appendTag("+3")}))
	require.NoError(t, r.Register("broken", 2, upcast.Step{From: 1, Fn: func([]byte) ([]byte, error) { return nil, errors.New("no total") }}))

	tests := []struct {
		name      string
		eventType string
		version   int
		want      string
		wantErr   error
	}{
		{name: "current passes through", eventType: "created", version: 3, want: "p"},
		{name: "chained from v1", eventType: "created", version: 1, want: "p+2+3"},
		{name: "one step", eventType: "created", version: 2, want: "p+3"},
		{name: "newer than known", eventType: "created", version: 4, wantErr: upcast.ErrUnknownVersion},
		{name: "zero", eventType: "created", version: 0, wantErr: upcast.ErrInvalidVersion},
		{name: "negative", eventType: "created", version: -1, wantErr: upcast.ErrInvalidVersion},
		{name: "older than the oldest upcaster", eventType: "paid", version: 1, wantErr: upcast.ErrNoUpcaster},
		{name: "upcaster fails", eventType: "broken", version: 1, wantErr: upcast.ErrUpcastFailed},
		{name: "unregistered type at v1", eventType: "shipped", version: 1, want: "p"},
		{name: "unregistered type at v2", eventType: "shipped", version: 2, wantErr: upcast.ErrUnknownVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, v, err := r.Upcast(tt.eventType, tt.version, []byte("p"))
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.Contains(t, err.Error(), tt.eventType, "the reason names the event type")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
			require.Equal(t, r.Current(tt.eventType), v)
		})
	}
}

func TestRegisterRejectsBadSetups(t *testing.T) {
	t.Parallel()
	id := appendTag("")
	tests := []struct {
		name    string
		current int
		steps   []upcast.Step
	}{
		{name: "current 0", current: 0},
		{name: "step at current", current: 2, steps: []upcast.Step{{From: 2, Fn: id}}},
		{name: "step from 0", current: 2, steps: []upcast.Step{{From: 0, Fn: id}}},
		{name: "nil function", current: 2, steps: []upcast.Step{{From: 1}}},
		{name: "two steps from one version", current: 3, steps: []upcast.Step{{From: 2, Fn: id}, {From: 2, Fn: id}}},
		{name: "hole in the chain", current: 4, steps: []upcast.Step{{From: 1, Fn: id}, {From: 3, Fn: id}}},
		{name: "chain short of current", current: 3, steps: []upcast.Step{{From: 1, Fn: id}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Error(t, upcast.NewRegistry().Register("created", tt.current, tt.steps...))
		})
	}
	r := upcast.NewRegistry()
	require.NoError(t, r.Register("created", 1))
	require.ErrorContains(t, r.Register("created", 2, upcast.Step{From: 1, Fn: id}), "already registered")
	require.Error(t, r.Register("", 1))
}
