package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/workflows"
)

// fakeActivities stand in for package activities under the registered
// names: they record what the workflow asked for, in order.
type fakeActivities struct {
	delivered int64 // what LoadCursor returns

	mu          sync.Mutex
	failures    map[int64]int // publish attempts of a version that fail first
	attempts    []int64       // every publish attempt, in order
	published   []workflows.PublishInput
	cursorCalls []workflows.CursorInput
	batches     [][]int64 // versions of each fast-path call, as asked
	// batchCursorReads counts fast-path calls that read the cursor
	// (LoadCursor) instead of LoadCursor's own activity.
	batchCursorReads int
	regular          []int64 // versions of each regular-path attempt
	// cursorDown is how many LoadCursor attempts fail first, as while
	// PostgreSQL is down.
	cursorDown int

	// settings are what the worker answers a run that asks (Revision2);
	// asked counts the calls that asked.
	settings workflows.Settings
	asked    int
}

// answer fills a result's settings as activities.Publish does: the
// worker's, defaults filled.
func (f *fakeActivities) answer() *workflows.Settings {
	f.asked++
	s := f.settings.WithDefaults()
	return &s
}

// PublishBatch publishes the leading events that would not fail, like
// activities.PublishBatch; an injected failure stops the batch without
// being used up (the fast path's attempt is not one the policy counts), and
// the workflow then takes the regular path, where Publish uses it up.
func (f *fakeActivities) PublishBatch(_ context.Context, in workflows.PublishBatchInput) (workflows.PublishBatchResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var asked []int64
	for _, ev := range in.Events {
		asked = append(asked, ev.Version)
	}
	f.batches = append(f.batches, asked)
	var res workflows.PublishBatchResult
	if in.LoadCursor {
		f.batchCursorReads++
		res.Cursor = f.delivered
		var run []workflows.EventRef
		for _, ev := range in.Events {
			if ev.Version == f.delivered+1+int64(len(run)) {
				run = append(run, ev)
			} else if ev.Version > f.delivered {
				break
			}
		}
		if len(run) == 0 {
			return res, nil
		}
		in.Events = run
	}
	if in.Settings {
		res.Settings = f.answer()
		in.Events = in.Events[:min(len(in.Events), max(res.Settings.PublishBatchSize, 0))]
		if len(in.Events) == 0 {
			return res, nil
		}
	}
	for _, ev := range in.Events {
		if f.failures[ev.Version] > 0 {
			res.Stopped = fmt.Sprintf("version %d fails (fake)", ev.Version)
			break
		}
		f.attempts = append(f.attempts, ev.Version)
		f.published = append(f.published, workflows.PublishInput{EventID: ev.ID, AggregateType: in.AggregateType, AggregateID: in.AggregateID, Version: ev.Version})
		res.Published++
	}
	if res.Published == 0 {
		return res, errors.New(res.Stopped)
	}
	return res, nil
}

func (f *fakeActivities) Publish(_ context.Context, in workflows.PublishInput) (workflows.PublishResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, in.Version)
	f.regular = append(f.regular, in.Version)
	if f.failures[in.Version] > 0 {
		f.failures[in.Version]--
		return workflows.PublishResult{}, fmt.Errorf("broker unavailable (fake), version %d", in.Version)
	}
	f.published = append(f.published, in)
	return workflows.PublishResult{}, nil
}

func (f *fakeActivities) LoadCursor(_ context.Context, in workflows.CursorInput) (workflows.CursorResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cursorCalls = append(f.cursorCalls, in)
	if f.cursorDown > 0 {
		f.cursorDown--
		return workflows.CursorResult{}, errors.New("load cursor: dial tcp: connect: connection refused (fake)")
	}
	res := workflows.CursorResult{Delivered: f.delivered}
	if in.Settings {
		res.Settings = f.answer()
	}
	return res, nil
}

func (f *fakeActivities) publishedVersions() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int64, len(f.published))
	for i, in := range f.published {
		out[i] = in.Version
	}
	return out
}

type bundle struct {
	env   *testsuite.TestWorkflowEnvironment
	fakes *fakeActivities
}

// setup returns a test environment with the aggregate workflow and fake
// activities registered under their wire names; LoadCursor answers
// delivered.
func setup(t *testing.T, delivered int64) *bundle {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	f := &fakeActivities{delivered: delivered, failures: map[int64]int{}}
	env.RegisterWorkflowWithOptions(workflows.Aggregate, workflow.RegisterOptions{Name: workflows.AggregateWorkflowName})
	env.RegisterActivityWithOptions(f.Publish, activity.RegisterOptions{Name: workflows.PublishEventActivity})
	env.RegisterActivityWithOptions(f.LoadCursor, activity.RegisterOptions{Name: workflows.LoadCursorActivity})
	env.RegisterActivityWithOptions(f.PublishBatch, activity.RegisterOptions{Name: workflows.PublishBatchActivity})
	return &bundle{env: env, fakes: f}
}

func ev(version int64) workflows.EventRef {
	return workflows.EventRef{ID: fmt.Sprintf("evt-%d", version), Version: version, Type: "order.changed"}
}

func evs(versions ...int64) []workflows.EventRef {
	out := make([]workflows.EventRef, len(versions))
	for i, v := range versions {
		out[i] = ev(v)
	}
	return out
}

// signalAt sends one EventsSignal with the given versions after d of
// workflow time.
func (b *bundle) signalAt(d time.Duration, versions ...int64) {
	b.env.RegisterDelayedCallback(func() {
		b.env.SignalWorkflow(workflows.EventsSignal, workflows.EventsSignalArg{Events: evs(versions...)})
	}, d)
}

// observation is what a delayed callback saw; it is checked after the
// workflow ran, on the test goroutine.
type observation struct {
	state     workflows.State
	err       error
	published []int64
	completed bool
}

// observeAt queries the workflow's state after d of workflow time.
func (b *bundle) observeAt(d time.Duration) *observation {
	o := &observation{}
	b.env.RegisterDelayedCallback(func() {
		o.completed = b.env.IsWorkflowCompleted()
		o.published = b.fakes.publishedVersions()
		v, err := b.env.QueryWorkflow(workflows.StateQuery)
		if err != nil {
			o.err = err
			return
		}
		o.err = v.Get(&o.state)
	}, d)
	return o
}

func input(idle time.Duration) workflows.AggregateInput {
	return workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", IdleTimeout: idle}
}

// run executes the workflow and returns how much workflow time it took.
func (b *bundle) run(in workflows.AggregateInput) time.Duration {
	start := b.env.Now()
	b.env.ExecuteWorkflow(workflows.AggregateWorkflowName, in)
	return b.env.Now().Sub(start)
}

func (b *bundle) requireCompleted(t *testing.T) {
	t.Helper()
	require.True(t, b.env.IsWorkflowCompleted())
	require.NoError(t, b.env.GetWorkflowError())
}

func TestPublishesInVersionOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.signalAt(1*time.Second, 3)
	b.signalAt(2*time.Second, 1)
	b.signalAt(3*time.Second, 2)
	b.run(input(time.Minute))

	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2, 3}, b.fakes.publishedVersions())
	for _, in := range b.fakes.published {
		require.Equal(t, fmt.Sprintf("evt-%d", in.Version), in.EventID)
		require.Equal(t, "order", in.AggregateType)
		require.Equal(t, "o-1", in.AggregateID)
	}
	require.Equal(t, []workflows.CursorInput{{AggregateType: "order", AggregateID: "o-1"}}, b.fakes.cursorCalls)
}

func TestOneSignalOutOfOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.signalAt(time.Second, 4, 2, 3, 1)
	b.run(input(time.Minute))

	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2, 3, 4}, b.fakes.publishedVersions())
}

func TestDropsDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.signalAt(1*time.Second, 1, 2)
	b.signalAt(2*time.Second, 2, 1) // both delivered by now: 2 duplicates
	b.signalAt(3*time.Second, 4, 4) // one pending, one repeat: 1 duplicate
	b.signalAt(4*time.Second, 4)    // still pending (3 is missing): 1 duplicate
	b.signalAt(5*time.Second, 3)
	o := b.observeAt(6 * time.Second)
	b.run(input(time.Minute))

	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2, 3, 4}, b.fakes.publishedVersions())
	require.NoError(t, o.err)
	require.Equal(t, workflows.State{Delivered: 4, Pending: []int64{}, Duplicates: 4, Unread: unread(0)}, o.state)
}

func TestResumesFromLoadedCursor(t *testing.T) {
	t.Parallel()
	b := setup(t, 5)
	b.signalAt(1*time.Second, 3, 6)
	b.signalAt(2*time.Second, 5)
	o := b.observeAt(3 * time.Second)
	b.run(input(time.Minute))

	b.requireCompleted(t)
	require.Equal(t, []int64{6}, b.fakes.publishedVersions())
	require.NoError(t, o.err)
	require.Equal(t, workflows.State{Delivered: 6, Pending: []int64{}, Duplicates: 2, Unread: unread(0)}, o.state)
}

func TestWaitsForMissingVersion(t *testing.T) {
	t.Parallel()
	const idle = 10 * time.Second
	b := setup(t, 0)
	b.signalAt(1*time.Second, 2)
	gap := b.observeAt(2 * time.Second)
	// Long after the idle timeout: a workflow with a gap must still run.
	late := b.observeAt(100 * idle)
	b.signalAt(100*idle+time.Second, 1)
	took := b.run(input(idle))

	require.NoError(t, gap.err)
	require.Empty(t, gap.published)
	require.Equal(t, workflows.State{Pending: []int64{2}, Unread: unread(0)}, gap.state)

	require.False(t, late.completed, "completed while version 1 was missing")
	require.NoError(t, late.err)
	require.Equal(t, workflows.State{Pending: []int64{2}, Unread: unread(0)}, late.state)
	require.Empty(t, late.published)

	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2}, b.fakes.publishedVersions())
	require.GreaterOrEqual(t, took, 100*idle+time.Second+idle)
}

func TestCompletesWhenIdle(t *testing.T) {
	t.Parallel()
	t.Run("nothing signalled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		took := b.run(input(5 * time.Second))
		b.requireCompleted(t)
		require.Empty(t, b.fakes.publishedVersions())
		require.GreaterOrEqual(t, took, 5*time.Second)
		require.Less(t, took, 6*time.Second)
	})
	t.Run("each signal restarts the idle timer", func(t *testing.T) {
		t.Parallel()
		const idle = 10 * time.Second
		b := setup(t, 0)
		b.signalAt(8*time.Second, 1)
		b.signalAt(16*time.Second, 2)
		took := b.run(input(idle))
		b.requireCompleted(t)
		require.Equal(t, []int64{1, 2}, b.fakes.publishedVersions())
		require.GreaterOrEqual(t, took, 16*time.Second+idle)
	})
	t.Run("zero means the default", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		took := b.run(input(0))
		b.requireCompleted(t)
		require.GreaterOrEqual(t, took, workflows.DefaultIdleTimeout)
		require.Less(t, took, workflows.DefaultIdleTimeout+time.Second)
	})
}

func TestRetriesFailedPublishInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.fakes.failures[2] = 3
	b.signalAt(time.Second, 1, 2, 3)
	b.run(input(time.Minute))

	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2, 3}, b.fakes.publishedVersions())
	// Version 3 waits until 2 succeeded: no attempt of 3 before the fourth of 2.
	require.Equal(t, []int64{1, 2, 2, 2, 2, 3}, b.fakes.attempts)
}

// decodeContinueAsNew checks err is a continue-as-new of the aggregate
// workflow and returns the next run's input.
func decodeContinueAsNew(t *testing.T, err error) workflows.AggregateInput {
	t.Helper()
	require.Error(t, err)
	require.True(t, workflow.IsContinueAsNewError(err), "want continue-as-new, got %v", err)
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(err, &can))
	require.Equal(t, workflows.AggregateWorkflowName, can.WorkflowType.Name)
	var next workflows.AggregateInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	return next
}

// The test environment does not count history events, so these tests model
// a real run's history: the start (execution started, a workflow task's three
// events, the cursor marker) and, per publish, the activity's three events
// plus the workflow task that handles its result. Signals add a few more;
// leaving them out only postpones the roll-over.
const (
	historyAtStart    = 5
	historyPerPublish = 6
)

// modelHistory makes GetCurrentHistoryLength grow with every publish.
func (b *bundle) modelHistory() {
	length := historyAtStart
	b.env.SetCurrentHistoryLength(length)
	b.env.SetOnActivityCompletedListener(func(info *activity.Info, _ converter.EncodedValue, _ error) {
		if info.ActivityType.Name == workflows.PublishEventActivity {
			length += historyPerPublish
			b.env.SetCurrentHistoryLength(length)
		}
	})
	// A fast-path batch is one marker, but it may share a workflow task
	// with nothing else: count it like a regular publish, the worse case.
	// (The test environment names local activities after their Go
	// function, so the fake's own count tells batches from the cursor.)
	seen := 0
	b.env.SetOnLocalActivityCompletedListener(func(*activity.Info, converter.EncodedValue, error) {
		b.fakes.mu.Lock()
		n := len(b.fakes.batches)
		b.fakes.mu.Unlock()
		length += historyPerPublish * (n - seen)
		seen = n
		b.env.SetCurrentHistoryLength(length)
	})
}

// publishesPerRun is how many events a run publishes before its modelled
// history reaches maxHistory: the budget is checked after every event.
func publishesPerRun(maxHistory int) int {
	n := 0
	for historyAtStart+historyPerPublish*n < maxHistory {
		n++
	}
	return n
}

func versions(from, to int64) []int64 {
	var out []int64
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}

func TestContinuesAsNewWithState(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.modelHistory()
	in := input(time.Minute)
	in.MaxHistoryEvents = 30
	in.PublishBatchSize = -1 // the model counts regular publishes
	k := int64(publishesPerRun(in.MaxHistoryEvents))
	require.Less(t, k, int64(10), "the budget must run out before the backlog does")
	b.signalAt(time.Second, 12, 3, 1, 2, 4, 5, 6, 7, 8, 9, 10, 13, 3, 14)
	b.run(in)

	require.True(t, b.env.IsWorkflowCompleted())
	next := decodeContinueAsNew(t, b.env.GetWorkflowError())
	require.Equal(t, versions(1, k), b.fakes.publishedVersions())
	require.Equal(t, workflows.AggregateInput{
		AggregateType:    "order",
		AggregateID:      "o-1",
		Resumed:          true,
		Delivered:        k,
		Pending:          evs(append(versions(k+1, 10), 12, 13, 14)...),
		IdleTimeout:      time.Minute,
		MaxHistoryEvents: 30,
		PublishBatchSize: -1,
	}, next)

	// The next run starts from that input: it must not reload the cursor
	// (PostgreSQL may lag behind what this run delivered), and it publishes
	// the carried events, the later ones once the gap closes.
	b2 := setup(t, 0)
	b2.signalAt(time.Second, 11)
	b2.run(next)
	b2.requireCompleted(t)
	require.Empty(t, b2.fakes.cursorCalls)
	require.Equal(t, versions(k+1, 14), b2.fakes.publishedVersions())
}

func TestContinuesAsNewWhenSuggested(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.signalAt(time.Second, 1, 2)
	b.env.RegisterDelayedCallback(func() {
		b.env.SetContinueAsNewSuggested(true)
		b.env.SignalWorkflow(workflows.EventsSignal, workflows.EventsSignalArg{Events: evs(3, 5)})
	}, 2*time.Second)
	b.run(input(time.Minute))

	next := decodeContinueAsNew(t, b.env.GetWorkflowError())
	require.Equal(t, []int64{1, 2, 3}, b.fakes.publishedVersions())
	require.True(t, next.Resumed)
	require.Equal(t, int64(3), next.Delivered)
	require.Equal(t, evs(5), next.Pending)
}

// Many events across several runs: every version is published exactly once
// and in order, whatever the run boundaries.
func TestContinueAsNewChainPublishesEachOnce(t *testing.T) {
	t.Parallel()
	const total = 60
	in := input(time.Minute)
	in.MaxHistoryEvents = 30
	in.PublishBatchSize = -1 // the model counts regular publishes
	perRun := publishesPerRun(in.MaxHistoryEvents)
	var published []int64
	sent := int64(0)
	runs := 0
	for ; ; runs++ {
		require.Less(t, runs, 3*total/perRun, "too many runs")
		b := setup(t, 0)
		b.modelHistory()
		if sent < total {
			// The next ten events in reverse order, with the previous
			// batch's last three repeated. A run that continues as new
			// before the callback fires never gets them; the next run does.
			batch := versions(max(sent-2, 1), min(sent+10, total))
			slices.Reverse(batch)
			b.env.RegisterDelayedCallback(func() {
				b.env.SignalWorkflow(workflows.EventsSignal, workflows.EventsSignalArg{Events: evs(batch...)})
				sent = batch[0]
			}, time.Second)
		}
		b.run(in)
		got := b.fakes.publishedVersions()
		published = append(published, got...)
		if runs > 0 {
			require.Empty(t, b.fakes.cursorCalls, "run %d reloaded the cursor", runs)
		}
		err := b.env.GetWorkflowError()
		if err == nil {
			break
		}
		require.Len(t, got, perRun, "run %d continued as new before its budget ran out", runs)
		in = decodeContinueAsNew(t, err)
	}
	require.Equal(t, versions(1, total), published)
	require.Greater(t, runs, total/perRun-1)
}

// The fast path: consecutive events go out in batches of PublishBatchSize,
// one local activity each, and nothing takes the regular path.
func TestFastPathPublishesInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	in := input(time.Minute)
	in.PublishBatchSize = 4
	b.signalAt(time.Second, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
	b.run(in)
	b.requireCompleted(t)
	require.Equal(t, versions(1, 10), b.fakes.publishedVersions())
	require.Equal(t, [][]int64{{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10}}, b.fakes.batches)
	require.Empty(t, b.fakes.regular)
}

// A batch stops before a gap and takes the rest once the gap closes.
func TestFastPathStopsAtGap(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.signalAt(time.Second, 1, 2, 4, 5)
	b.signalAt(time.Minute/2, 3)
	b.run(fastInput(time.Minute))
	b.requireCompleted(t)
	require.Equal(t, versions(1, 5), b.fakes.publishedVersions())
	require.Equal(t, [][]int64{{1, 2}, {3, 4, 5}}, b.fakes.batches)
	require.Empty(t, b.fakes.regular)
}

// An event the fast path cannot publish goes to the regular path, whose
// attempts the policy counts and the UI shows; the batches resume after it.
func TestFastPathFallsBackToRegularPath(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.fakes.failures[4] = 2
	b.signalAt(time.Second, 1, 2, 3, 4, 5, 6)
	b.run(fastInput(time.Minute))
	b.requireCompleted(t)
	require.Equal(t, versions(1, 6), b.fakes.publishedVersions())
	require.Equal(t, [][]int64{{1, 2, 3, 4, 5, 6}, {4, 5, 6}, {5, 6}}, b.fakes.batches)
	require.Equal(t, []int64{4, 4, 4}, b.fakes.regular, "two failed regular attempts and a good one")
}

// fastInput is input with the fast path on, as pollers start workflows.
func fastInput(idle time.Duration) workflows.AggregateInput {
	in := input(idle)
	in.PublishBatchSize = workflows.DefaultPublishBatchSize
	return in
}

// Without a batch size (histories from before the fast path, or a poller
// with it turned off) every event takes the regular path.
func TestFastPathOff(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	in := input(time.Minute)
	in.PublishBatchSize = -1
	b.signalAt(time.Second, 1, 2, 3)
	b.run(in)
	b.requireCompleted(t)
	require.Empty(t, b.fakes.batches)
	require.Equal(t, []int64{1, 2, 3}, b.fakes.regular)
}

// Continue-as-new on the fast path: every event once, in order, across runs.
func TestFastPathContinueAsNewChain(t *testing.T) {
	t.Parallel()
	const total = 60
	in := input(time.Minute)
	in.MaxHistoryEvents = 30
	in.PublishBatchSize = 3
	var published []int64
	b := setup(t, 0)
	b.modelHistory()
	b.signalAt(time.Second, versions(1, total)...)
	runs := 1
	for ; ; runs++ {
		require.Less(t, runs, total, "too many runs")
		b.run(in)
		published = append(published, b.fakes.publishedVersions()...)
		require.Empty(t, b.fakes.regular)
		err := b.env.GetWorkflowError()
		if err == nil {
			break
		}
		in = decodeContinueAsNew(t, err)
		b = setup(t, 0)
		b.modelHistory()
	}
	require.Equal(t, versions(1, total), published)
	require.Greater(t, runs, 2)
}

// On the fast path one idle timer serves many signals: the workflow still
// completes one idle timeout after the last event, not after the first.
func TestFastPathIdleCountsFromLastEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.signalAt(time.Second, 1)
	b.signalAt(30*time.Second, 2)
	b.signalAt(50*time.Second, 3)
	took := b.run(fastInput(time.Minute))
	b.requireCompleted(t)
	require.Equal(t, versions(1, 3), b.fakes.publishedVersions())
	require.GreaterOrEqual(t, took, 110*time.Second, "completed before a minute of idleness")
	require.Less(t, took, 112*time.Second)
}

// oneShotInput is how pollers start an aggregate they have not signalled
// recently: its events in the input, the current revision, no idle wait.
func oneShotInput(versions ...int64) workflows.AggregateInput {
	in := fastInput(time.Minute)
	in.Revision = workflows.Revision1
	in.OneShot = true
	in.Pending = evs(versions...)
	return in
}

// A one-shot run publishes its events in one local activity that also
// reads the cursor, and completes at once: no cursor activity of its own,
// no idle timer.
func TestOneShotPublishesAndCompletesAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	took := b.run(oneShotInput(1, 2, 3))
	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2, 3}, b.fakes.publishedVersions())
	require.Equal(t, [][]int64{{1, 2, 3}}, b.fakes.batches)
	require.Equal(t, 1, b.fakes.batchCursorReads)
	require.Empty(t, b.fakes.cursorCalls, "the cursor came with the batch")
	require.Less(t, took, time.Second, "a one-shot run waited")
}

// Events an earlier run delivered are dropped by the cursor the batch read.
func TestOneShotDropsDeliveredEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	b.run(oneShotInput(1, 2, 3, 4))
	b.requireCompleted(t)
	require.Equal(t, []int64{3, 4}, b.fakes.publishedVersions())
	require.Empty(t, b.fakes.cursorCalls)
	t.Run("all delivered already", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 5)
		b.run(oneShotInput(4, 5))
		b.requireCompleted(t)
		require.Empty(t, b.fakes.publishedVersions())
		require.Equal(t, 1, b.fakes.batchCursorReads)
		require.Empty(t, b.fakes.cursorCalls)
	})
}

// A one-shot run with a gap waits for the missing version however long it
// takes, then publishes the rest and completes without an idle wait.
func TestOneShotWaitsForMissingVersion(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	mid := b.observeAt(10 * time.Minute)
	b.signalAt(10*time.Minute+time.Second, 2)
	took := b.run(oneShotInput(1, 3))
	require.NoError(t, mid.err)
	require.False(t, mid.completed, "completed while version 2 was missing")
	require.Equal(t, []int64{1}, mid.published)
	require.Equal(t, []int64{3}, mid.state.Pending)
	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2, 3}, b.fakes.publishedVersions())
	require.Less(t, took, 10*time.Minute+2*time.Second, "completed late: an idle wait after the gap closed")
}

// Signals that reach a one-shot run before it completes are published by
// it (a poller's Signal-With-Start found the run still open).
func TestOneShotTakesSignalsBeforeCompleting(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.env.RegisterDelayedCallback(func() {
		b.env.SignalWorkflow(workflows.EventsSignal, workflows.EventsSignalArg{Events: evs(2, 3)})
	}, 0)
	b.run(oneShotInput(1, 2))
	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2, 3}, b.fakes.publishedVersions())
}

// When the first batch fails, the run reads the cursor with its own
// activity and publishes on the regular path, with retries.
func TestOneShotFirstBatchFails(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.fakes.failures[1] = 1
	b.run(oneShotInput(1, 2))
	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2}, b.fakes.publishedVersions())
	require.Len(t, b.fakes.cursorCalls, 1)
	require.Equal(t, []int64{1, 1}, b.fakes.regular, "a failed regular attempt and a good one")
}

// PostgreSQL goes down as a one-shot run starts: its first batch fails,
// and reading the cursor fails for a minute (attempts at 0, 1, 3, 7, 15,
// 31 s fail, the one at 61 s answers). The run waits it out and publishes
// its events; it does not fail, which would leave them dispatched in
// PostgreSQL and held by no run.
func TestOneShotOutlastsPostgresOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.fakes.failures[1] = 1
	b.fakes.cursorDown = 6
	took := b.run(oneShotInput(1, 2))
	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2}, b.fakes.publishedVersions())
	require.Len(t, b.fakes.cursorCalls, 7)
	require.GreaterOrEqual(t, took, time.Minute, "the cursor answered before the outage ended")
}

// A keep-alive run of the current revision (Signal-With-Start) also takes
// its cursor from the first batch, and still waits IdleTimeout at the end.
func TestRevision1KeepAliveReadsCursorInFirstBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	in := fastInput(time.Minute)
	in.Revision = workflows.Revision1
	b.signalAt(0, 1, 2, 3)
	b.signalAt(10*time.Second, 4)
	took := b.run(in)
	b.requireCompleted(t)
	require.Equal(t, []int64{2, 3, 4}, b.fakes.publishedVersions())
	require.Equal(t, [][]int64{{1, 2, 3}, {4}}, b.fakes.batches)
	require.Equal(t, 1, b.fakes.batchCursorReads)
	require.Empty(t, b.fakes.cursorCalls)
	require.GreaterOrEqual(t, took, 70*time.Second, "no idle wait")
}

// The regular path (no batch size) with the current revision reads the
// cursor with its activity.
func TestRevision1WithoutFastPath(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	in := oneShotInput(1, 2)
	in.PublishBatchSize = 0
	b.run(in)
	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2}, b.fakes.regular)
	require.Len(t, b.fakes.cursorCalls, 1)
}
