package workflows_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/workflows"
)

// r2Input is how pollers start runs now: no settings in the input.
func r2Input() workflows.AggregateInput {
	return workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", Revision: workflows.Revision2}
}

// A run of Revision2 takes its settings from the worker's answer to its
// first batch, which also reads the cursor: the batch size cuts that batch
// and the next ones, and the idle timeout is the worker's, not the input's
// or the default.
func TestRevision2TakesSettingsFromFirstBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.fakes.settings = workflows.Settings{PublishBatchSize: 2, IdleTimeout: 10 * time.Second}
	b.signalAt(0, 1, 2, 3, 4, 5)
	took := b.run(r2Input())
	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2, 3, 4, 5}, b.fakes.publishedVersions())
	require.Equal(t, [][]int64{{1, 2, 3, 4, 5}, {3, 4}, {5}}, b.fakes.batches, "asked with all, then the worker's size")
	require.Equal(t, 1, b.fakes.asked, "the settings are asked for once per run")
	require.Equal(t, 1, b.fakes.batchCursorReads)
	require.Empty(t, b.fakes.cursorCalls)
	require.GreaterOrEqual(t, took, 10*time.Second)
	require.Less(t, took, 11*time.Second, "idled longer than the worker's 10s")
}

// A one-shot run of Revision2 costs what one of Revision1 does: one
// batch, which reads the cursor and the settings, and no wait.
func TestRevision2OneShot(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	in := r2Input()
	in.OneShot = true
	in.Pending = evs(1)
	took := b.run(in)
	b.requireCompleted(t)
	require.Equal(t, []int64{1}, b.fakes.publishedVersions())
	require.Equal(t, [][]int64{{1}}, b.fakes.batches)
	require.Equal(t, 1, b.fakes.asked)
	require.Empty(t, b.fakes.cursorCalls)
	require.Less(t, took, time.Second)
}

// When the first batch fails, the cursor read answers with the settings:
// the worker's policy bounds the regular path's attempts.
func TestRevision2FirstBatchFailsSettingsFromCursor(t *testing.T) {
	t.Parallel()
	b := qsetup(t)
	b.fakes.settings = workflows.Settings{Policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 2}}}
	b.fakes.fail("evt-1", "Unroutable", -1)
	in := r2Input()
	in.OneShot = true
	in.Pending = evs(1, 2)
	b.healAt(time.Hour, "evt-1")
	b.repairAt(time.Hour, "u-1", repairReq("r-1", workflows.ActionRetry, "evt-1"))
	took := b.run(in)
	calls := b.fakes.calls()
	require.Equal(t, repeat("evt-1", 2), calls.attempts[:2], "two attempts: the worker's policy, not the default ten")
	require.Len(t, calls.quarantined, 1)
	b.requireIdleCompletion(t, took, time.Hour+workflows.DefaultIdleTimeout)
	require.Equal(t, ids(1, 2), calls.published)
}

// With the worker's fast path off, the first batch only asks (and reads
// the cursor), and every event goes the regular way; the run still idles
// on one timer.
func TestRevision2FastPathOff(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.fakes.settings = workflows.Settings{PublishBatchSize: -1, IdleTimeout: 5 * time.Second}
	b.signalAt(0, 1, 2)
	b.signalAt(2*time.Second, 3)
	took := b.run(r2Input())
	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2, 3}, b.fakes.publishedVersions())
	require.Equal(t, []int64{1, 2, 3}, b.fakes.regular)
	require.Equal(t, [][]int64{{1, 2}}, b.fakes.batches, "one batch, to ask")
	require.GreaterOrEqual(t, took, 7*time.Second)
	require.Less(t, took, 8*time.Second)
}

// A run of Revision2 continues as new without settings in the next input,
// and the next run asks its worker again before anything else: a change
// made meanwhile applies there.
func TestRevision2ContinueAsNewAsksAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.modelHistory()
	b.fakes.settings = workflows.Settings{PublishBatchSize: -1, MaxHistoryEvents: 30}
	k := int64(publishesPerRun(30))
	b.signalAt(time.Second, versions(1, 12)...)
	b.run(r2Input())
	next := decodeContinueAsNew(t, b.env.GetWorkflowError())
	require.Equal(t, versions(1, k), b.fakes.publishedVersions())
	require.Equal(t, workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", Revision: workflows.Revision2,
		Resumed: true, Delivered: k, Pending: evs(versions(k+1, 12)...)}, next, "no settings travel in the input")

	// The worker's settings changed: the next run takes the new ones.
	b2 := setup(t, 0)
	b2.fakes.settings = workflows.Settings{PublishBatchSize: 3, IdleTimeout: 20 * time.Second}
	took := b2.run(next)
	b2.requireCompleted(t)
	require.Len(t, b2.fakes.cursorCalls, 1)
	require.True(t, b2.fakes.cursorCalls[0].Settings, "the resumed run asked")
	require.Equal(t, 1, b2.fakes.asked)
	require.Equal(t, versions(k+1, 12), b2.fakes.publishedVersions())
	require.Empty(t, b2.fakes.regular, "the new batch size turned the fast path on")
	require.Zero(t, b2.fakes.batchCursorReads, "a resumed run does not read the cursor in a batch")
	require.GreaterOrEqual(t, took, 20*time.Second)
	require.Less(t, took, 21*time.Second)
}

// The worker's bound on blocked references applies to a run of Revision2.
func TestRevision2BlockedRefsFromWorker(t *testing.T) {
	t.Parallel()
	b := qsetup(t)
	b.fakes.settings = workflows.Settings{MaxBlockedRefs: 2, Policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 1}}}
	b.fakes.fail("evt-1", "Unroutable", -1)
	b.signalAt(0, 1, 2, 3)
	b.signalAt(time.Minute, 4, 5)
	b.healAt(time.Hour, "evt-1")
	b.repairAt(time.Hour, "u-1", repairReq("r-1", workflows.ActionRetry, "evt-1"))
	b.run(r2Input())
	b.fakes.mu.Lock()
	holds := slices.Clone(b.fakes.holds)
	b.fakes.mu.Unlock()
	var held []string
	for _, h := range holds {
		held = append(held, h.EventIDs...)
	}
	require.Equal(t, ids(3, 4, 5), held, "events beyond the worker's bound were handed back")
}

// A fresh run of Revision2 whose first batch fails while PostgreSQL is
// down keeps asking with the cursor read until it answers, settings
// included.
func TestRevision2CursorReadOutlastsAnOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.fakes.settings = workflows.Settings{IdleTimeout: 5 * time.Second}
	b.fakes.failures[1] = 1
	b.fakes.cursorDown = 6
	in := r2Input()
	in.OneShot = true
	in.Pending = evs(1, 2)
	took := b.run(in)
	b.requireCompleted(t)
	require.Equal(t, []int64{1, 2}, b.fakes.publishedVersions())
	require.Len(t, b.fakes.cursorCalls, 7)
	for _, c := range b.fakes.cursorCalls {
		require.True(t, c.Settings, "every attempt asks")
	}
	// The failed batch's answer went with its error; the cursor read's is
	// the one the run took.
	require.Equal(t, 2, b.fakes.asked)
	require.GreaterOrEqual(t, took, time.Minute, "the cursor answered before the outage ended")
}
