package activities

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/workflows"
)

// The reconciler re-dispatches only the rows an open run neither holds nor
// has delivered.
func TestNotHeldPicksRowsTheRunCannotPublish(t *testing.T) {
	t.Parallel()
	rows := func(vs ...int64) []relaydb.StuckRow {
		out := make([]relaydb.StuckRow, len(vs))
		for i, v := range vs {
			out[i] = relaydb.StuckRow{ID: "e" + strconv.FormatInt(v, 10), Version: v}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		rows []relaydb.StuckRow
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

// Rows dispatched after the open run started are candidates only when the
// run has taken every signal it got: otherwise their signals may wait in
// its channel.
func TestNotUnreadKeepsWhatTheRunMayNotHaveRead(t *testing.T) {
	t.Parallel()
	started := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rows := []relaydb.StuckRow{
		{ID: "before", Version: 1, DispatchedAt: started.Add(-time.Minute)},
		{ID: "after", Version: 2, DispatchedAt: started.Add(time.Minute)},
	}
	n := func(v int) *int { return &v }
	ids := func(rs []relaydb.StuckRow) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		unread  *int
		want    []string
		allRead bool
	}{
		{"every signal taken: a row marked after the run started was signalled to one that ended", n(0), []string{"before", "after"}, true},
		{"signals waiting in the channel", n(3), []string{"before"}, false},
		{"a worker from before State.Unread", nil, []string{"before"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, allRead := notUnread(slices.Clone(rows), started, tc.unread)
			require.Equal(t, tc.want, ids(got))
			require.Equal(t, tc.allRead, allRead)
		})
	}
}
