package activities

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/workflows"
)

func TestJudgeDrift(t *testing.T) {
	t.Parallel()
	k := relaydb.AggregateKey{Type: "order", ID: "o'42"}
	in := driftInput{DriftInput: workflows.DriftInput{ReconcileAfter: 10 * time.Minute}, publishFirst: true}
	owned := func(epoch int64) *relaydb.Owner {
		return &relaydb.Owner{Owner: relaydb.OwnerWorkflow, Epoch: epoch, Cause: "Unroutable", Since: time.Now()}
	}
	relay := &relaydb.Owner{Owner: relaydb.OwnerRelay, Epoch: 3, Holder: "r1"}
	notAsked := driftWorkflow{id: "ferry/order/o'42", status: "not asked"}
	running := func(delivered, publishing int64, pending ...int64) driftWorkflow {
		return driftWorkflow{id: "ferry/order/o'42", status: "Running",
			state: &workflows.State{Delivered: delivered, Publishing: publishing, Pending: pending}}
	}
	gone := driftWorkflow{id: "ferry/order/o'42", status: "Terminated"}
	tests := []struct {
		name   string
		before driftTable
		wf     driftWorkflow
		after  driftTable
		want   []string
	}{
		{"healthy, idle", driftTable{delivered: 5}, running(5, 0), driftTable{delivered: 5}, nil},
		{"healthy, pending held", driftTable{delivered: 5, dispatched: []int64{6, 7}}, running(5, 6, 6, 7), driftTable{delivered: 5, dispatched: []int64{6, 7}}, nil},
		{"publish in flight: row marked, workflow not yet told", driftTable{delivered: 6, dispatched: []int64{7}}, running(5, 6, 6, 7), driftTable{delivered: 6}, nil},
		{"batch in flight: table ahead within the held versions", driftTable{delivered: 9}, running(5, 6, 6, 7, 8, 9, 10), driftTable{delivered: 10}, nil},
		{"workflow moved on between the reads", driftTable{delivered: 5, dispatched: []int64{6}}, running(6, 0), driftTable{delivered: 6}, nil},
		{"closed workflow, nothing dispatched", driftTable{delivered: 5}, gone, driftTable{delivered: 5}, nil},
		{"closed after publishing its last rows", driftTable{delivered: 5, dispatched: []int64{6}}, gone, driftTable{delivered: 6}, nil},
		{"closed workflow with dispatched rows", driftTable{delivered: 5, dispatched: []int64{6, 7}}, gone, driftTable{delivered: 5, dispatched: []int64{6, 7}}, []string{workflows.DriftWorkflowGone}},
		{"no workflow, quarantined row", driftTable{delivered: 5, quarantined: []int64{6}}, driftWorkflow{id: "x", status: "not found"}, driftTable{delivered: 5, quarantined: []int64{6}}, []string{workflows.DriftWorkflowGone}},
		{"table ahead of the workflow", driftTable{delivered: 9}, running(5, 0), driftTable{delivered: 9}, []string{workflows.DriftWorkflowBehind}},
		{"table behind the workflow", driftTable{delivered: 2}, running(5, 0), driftTable{delivered: 2}, []string{workflows.DriftWorkflowAhead}},
		{"dispatched rows the workflow does not hold", driftTable{delivered: 5, dispatched: []int64{6, 7}}, running(5, 0), driftTable{delivered: 5, dispatched: []int64{6, 7}}, []string{workflows.DriftSignalLost}},
		{"rows below the cursor", driftTable{delivered: 5, below: []int64{4}}, running(5, 0), driftTable{delivered: 5, below: []int64{4}}, []string{workflows.DriftBelowCursor}},
		{"below the cursor in one read only", driftTable{delivered: 5, below: []int64{4}}, running(5, 0), driftTable{delivered: 5}, nil},
		// The publish-first lane.
		{"the lane's, published directly", driftTable{delivered: 5}, notAsked, driftTable{delivered: 5}, nil},
		{"the lane's, a relay publishing it", driftTable{delivered: 5, owner: relay}, notAsked, driftTable{delivered: 6, owner: relay}, nil},
		{"owned by a workflow with a run", driftTable{delivered: 5, owner: owned(7)}, running(5, 0), driftTable{delivered: 5, owner: owned(7)}, nil},
		{"owned by a workflow without a run", driftTable{delivered: 5, owner: owned(7)}, gone, driftTable{delivered: 5, owner: owned(7)}, []string{workflows.DriftOwnerWithoutRun}},
		{"handed over anew between the reads", driftTable{delivered: 5, owner: owned(7)}, gone, driftTable{delivered: 5, owner: owned(9)}, nil},
		{"released between the reads", driftTable{delivered: 5, owner: owned(7)}, gone, driftTable{delivered: 6}, nil},
		{"a row marked under a stale epoch", driftTable{delivered: 5, staleEpochs: []int64{4}}, notAsked, driftTable{delivered: 5, staleEpochs: []int64{4}}, []string{workflows.DriftStaleEpoch}},
		{"a stale epoch in one read only", driftTable{delivered: 5, staleEpochs: []int64{4}}, notAsked, driftTable{delivered: 6}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var kinds []string
			for _, d := range judgeDrift(k, tt.before, tt.wf, tt.after, in) {
				kinds = append(kinds, d.Kind)
				require.Equal(t, tt.wf.id, d.WorkflowID)
				require.NotEmpty(t, d.Differs)
				require.NotEmpty(t, d.Action)
			}
			require.Equal(t, tt.want, kinds)
		})
	}
}

// The advice names the aggregate in SQL a person can paste: quotes in
// identifiers are escaped.
func TestDriftAdviceQuotesIdentifiers(t *testing.T) {
	t.Parallel()
	d := judgeDrift(relaydb.AggregateKey{Type: "order", ID: "o'42"},
		driftTable{delivered: 5, dispatched: []int64{6, 7, 8, 10}}, driftWorkflow{id: "ferry/order/o'42", status: "Running", state: &workflows.State{Delivered: 5}},
		driftTable{delivered: 5, dispatched: []int64{6, 7, 8, 10}}, driftInput{})
	require.Len(t, d, 1)
	require.Contains(t, d[0].Differs, "rows v6-v8, v10 are dispatched")
	require.Contains(t, d[0].Action, "aggregate_type = 'order' AND aggregate_id = 'o''42' AND status = 'dispatched'")
}

func TestVersions(t *testing.T) {
	t.Parallel()
	require.Equal(t, "none", versions(nil))
	require.Equal(t, "v3", versions([]int64{3}))
	require.Equal(t, "v1-v3, v5, v7-v8", versions([]int64{1, 2, 3, 5, 7, 8}))
	many := make([]int64, 0, 30)
	for i := range 30 {
		many = append(many, int64(2*i))
	}
	require.Equal(t, "v0, v2, v4, v6, v8, v10, v12, v14, v16, v18, …", versions(many))
}
