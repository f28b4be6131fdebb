package activities

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// The reconciler re-dispatches only the rows an open run neither holds nor
// has delivered.
func TestNotHeldPicksRowsTheRunCannotPublish(t *testing.T) {
	t.Parallel()
	rows := func(vs ...int64) []outbox.StuckRow {
		out := make([]outbox.StuckRow, len(vs))
		for i, v := range vs {
			out[i] = outbox.StuckRow{ID: "e" + strconv.FormatInt(v, 10), Version: v}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		rows []outbox.StuckRow
		st   workflows.State
		want []int64
	}{
		{"a new run waiting for its predecessor's rows", rows(1, 2, 3), workflows.State{Pending: []int64{4}}, []int64{1, 2, 3}},
		{"held as pending (a gap, a block, carried over a continue-as-new)", rows(3, 4), workflows.State{Delivered: 1, Pending: []int64{3, 4}}, nil},
		{"being published", rows(2), workflows.State{Delivered: 1, Publishing: 2}, nil},
		{"at or below the run's cursor: a repeat would be dropped", rows(1, 2), workflows.State{Delivered: 2}, nil},
		{"some held, some not", rows(2, 3, 5), workflows.State{Delivered: 1, Publishing: 2, Pending: []int64{5}}, []int64{3}},
		{"nothing stuck", nil, workflows.State{Pending: []int64{1}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ids, vs := notHeld(tc.rows, tc.st)
			require.Equal(t, tc.want, vs)
			require.Len(t, ids, len(tc.want))
			for i, v := range tc.want {
				require.Equal(t, "e"+strconv.FormatInt(v, 10), ids[i])
			}
		})
	}
}
