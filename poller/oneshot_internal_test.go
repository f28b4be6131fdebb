package poller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

// recordingTemporal accepts every start and signal-with-start and records
// what they carried; running makes starts fail as if a run were open.
type recordingTemporal struct {
	client.Client

	mu      sync.Mutex
	running bool
	starts  []workflows.AggregateInput
	signals [][]workflows.EventRef
	eager   []bool
}

func (r *recordingTemporal) ExecuteWorkflow(_ context.Context, opts client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("running", "", "")
	}
	r.starts = append(r.starts, args[0].(workflows.AggregateInput))
	r.eager = append(r.eager, opts.EnableEagerStart && opts.WorkflowExecutionErrorWhenAlreadyStarted)
	return nil, nil
}

func (r *recordingTemporal) SignalWithStartWorkflow(_ context.Context, _, _ string, arg any, _ client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signals = append(r.signals, arg.(workflows.EventsSignalArg).Events)
	return nil, nil
}

func versionsOf(refs []workflows.EventRef) []int64 {
	out := make([]int64, len(refs))
	for i, r := range refs {
		out[i] = r.Version
	}
	return out
}

// A new aggregate gets a one-shot start with its events in the input; the
// same aggregate again, within the idle timeout, a signal; an aggregate
// whose run is open a signal after the refused start; keep-alive mode
// signals everything.
func TestDispatchStartsOneShotRunsThenSignals(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	rec := &recordingTemporal{}
	p := newPoller(t, db.Pool, Config{Temporal: rec})

	insertEvent(t, db.Pool, "order", "o-1", nil)
	insertEvent(t, db.Pool, "order", "o-1", nil)
	_, err := p.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, rec.starts, 1)
	in := rec.starts[0]
	require.True(t, in.OneShot)
	require.Equal(t, workflows.CurrentRevision, in.Revision)
	require.Equal(t, workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", Revision: workflows.Revision2,
		OneShot: true, Pending: in.Pending}, in, "no settings in the input: the run asks its worker")
	require.Equal(t, []int64{1, 2}, versionsOf(in.Pending))
	require.Equal(t, []bool{true}, rec.eager, "an eager start that fails when a run is open")
	require.Empty(t, rec.signals)

	insertEvent(t, db.Pool, "order", "o-1", nil)
	_, err = p.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, rec.starts, 1, "a recently dispatched aggregate was started again")
	require.Equal(t, [][]workflows.EventRef{{{ID: rec.signals[0][0].ID, Version: 3, Type: "test.happened"}}}, rec.signals)

	rec.running = true
	insertEvent(t, db.Pool, "order", "o-2", nil)
	_, err = p.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, rec.signals, 2, "the open run was not signalled after the refused start")
	require.Equal(t, []int64{1}, versionsOf(rec.signals[1]))

	keep := &recordingTemporal{}
	k := newPoller(t, db.Pool, Config{Temporal: keep, StartMode: StartKeepAlive})
	insertEvent(t, db.Pool, "order", "o-3", nil)
	_, err = k.RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, keep.starts)
	require.Len(t, keep.signals, 1)
}

// An aggregate's backlog goes out in parts of at most maxRefsPerDispatch
// references, in version order: the start's input, then signals.
func TestDispatchSplitsLargeGroups(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	const n = 2*maxRefsPerDispatch + 500
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'hot', 'order.placed', '{}' FROM generate_series(1, $1)`, n)
	require.NoError(t, err)
	rec := &recordingTemporal{}
	p := newPoller(t, db.Pool, Config{Temporal: rec, BatchSize: n, SignalTimeout: 5 * time.Second})
	got, err := p.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, n, got)
	require.Len(t, rec.starts, 1)
	require.Len(t, rec.starts[0].Pending, maxRefsPerDispatch)
	require.Len(t, rec.signals, 2)
	require.Len(t, rec.signals[0], maxRefsPerDispatch)
	require.Len(t, rec.signals[1], 500)
	var all []int64
	all = append(all, versionsOf(rec.starts[0].Pending)...)
	for _, s := range rec.signals {
		all = append(all, versionsOf(s)...)
	}
	for i, v := range all {
		require.Equal(t, int64(i+1), v)
	}
}

func TestChunks(t *testing.T) {
	t.Parallel()
	refs := func(n int) []workflows.EventRef { return make([]workflows.EventRef, n) }
	lens := func(cs [][]workflows.EventRef) []int {
		var out []int
		for _, c := range cs {
			out = append(out, len(c))
		}
		return out
	}
	require.Equal(t, []int{0}, lens(chunks(refs(0), 3)))
	require.Equal(t, []int{3}, lens(chunks(refs(3), 3)))
	require.Equal(t, []int{3, 1}, lens(chunks(refs(4), 3)))
	require.Equal(t, []int{3, 3, 2}, lens(chunks(refs(8), 3)))
}
