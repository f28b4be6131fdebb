package activities_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

func (b *bundle) publishBatch(t *testing.T, evs ...event) (workflows.PublishBatchResult, error) {
	t.Helper()
	in := workflows.PublishBatchInput{AggregateType: evs[0].AggregateType, AggregateID: evs[0].AggregateID}
	for _, ev := range evs {
		in.Events = append(in.Events, workflows.EventRef{ID: ev.ID, Version: ev.Version, Type: "created"})
	}
	var res workflows.PublishBatchResult
	val, err := b.env(t).ExecuteActivity(workflows.PublishBatchActivity, in)
	if err != nil {
		return res, err
	}
	require.NoError(t, val.Get(&res))
	return res, nil
}

// A batch goes out in order, skips what an earlier attempt published, and
// is marked in one go: rows published, delivered_version at the last.
func TestPublishBatchPublishesInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	var evs []event
	for range 5 {
		evs = append(evs, insert(t, b.db.Pool, "order", "o-1", row{}))
	}
	b.mustPublish(t, evs[1]) // published by an earlier attempt
	require.Equal(t, evs[1].ID, b.receive(t).MessageId)

	res, err := b.publishBatch(t, evs...)
	require.NoError(t, err)
	require.Equal(t, 5, res.Published)
	require.Empty(t, res.Stopped)

	for _, want := range []event{evs[0], evs[2], evs[3], evs[4]} {
		d := b.receive(t)
		require.Equal(t, want.ID, d.MessageId)
		require.Equal(t, want.Version, d.Headers[broker.HeaderAggregateVersion])
	}
	b.requireNoMessage(t)
	for _, ev := range evs {
		r := readRow(t, b.db.Pool, ev.ID)
		require.Equal(t, "published", r.Status, "v%d", ev.Version)
		require.NotNil(t, r.PublishedAt)
	}
	require.Equal(t, int64(5), delivered(t, b.db.Pool, "order", "o-1"))
}

// A row that disagrees with the signal ends the batch before it; as the
// first event it fails the batch for good, so the workflow's regular path
// classifies it.
func TestPublishBatchStopsAtMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	e1 := insert(t, b.db.Pool, "order", "o-1", row{})
	e2 := insert(t, b.db.Pool, "order", "o-1", row{})
	e3 := insert(t, b.db.Pool, "order", "o-1", row{})
	wrong := e2
	wrong.Version = 7

	res, err := b.publishBatch(t, e1, wrong, e3)
	require.NoError(t, err)
	require.Equal(t, 1, res.Published)
	require.Contains(t, res.Stopped, e2.ID)
	require.Equal(t, e1.ID, b.receive(t).MessageId)
	b.requireNoMessage(t)
	require.Equal(t, "pending", readRow(t, b.db.Pool, e2.ID).Status)
	require.Equal(t, int64(1), delivered(t, b.db.Pool, "order", "o-1"))

	_, err = b.publishBatch(t, wrong, e3)
	appErr := appError(t, err)
	require.Equal(t, activities.ErrTypeMismatch, appErr.Type())
	require.True(t, appErr.NonRetryable())
}

// With the broker down nothing is published: the batch fails retryably and
// the first row keeps the error for operators.
func TestPublishBatchBrokerDown(t *testing.T) {
	t.Parallel()
	pub := newPublisher(t, broker.Config{URL: "amqp://guest:guest@" + ferrytest.ClosedAddr(t) + "/", DialTimeout: time.Second})
	b := setup(t, activities.Config{}, pub)
	e1 := insert(t, b.db.Pool, "order", "o-1", row{})
	e2 := insert(t, b.db.Pool, "order", "o-1", row{})

	_, err := b.publishBatch(t, e1, e2)
	appErr := appError(t, err)
	require.Equal(t, activities.ErrTypeBroker, appErr.Type())
	require.False(t, appErr.NonRetryable())
	r := readRow(t, b.db.Pool, e1.ID)
	require.Equal(t, "pending", r.Status)
	require.NotNil(t, r.LastError)
	require.Contains(t, *r.LastError, broker.ErrUnavailable.Error())
	require.Equal(t, int64(0), delivered(t, b.db.Pool, "order", "o-1"))
}

// Effects come back per published event that has any.
func TestPublishBatchReturnsEffects(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{Effects: func(_, eventType string) []workflows.EffectStart {
		if eventType == "placed" {
			return []workflows.EffectStart{{Effect: "charge", WorkflowType: "ferry.effect.Charge"}}
		}
		return nil
	}}, nil)
	e1 := insert(t, b.db.Pool, "order", "o-1", row{EventType: "created"})
	e2 := insert(t, b.db.Pool, "order", "o-1", row{EventType: "placed"})

	res, err := b.publishBatch(t, e1, e2)
	require.NoError(t, err)
	require.Equal(t, 2, res.Published)
	require.Equal(t, []workflows.EventEffects{{Version: 2, Effects: []workflows.EffectStart{{Effect: "charge", WorkflowType: "ferry.effect.Charge"}}}}, res.Effects)
}

func (b *bundle) publishBatchAsking(t *testing.T, evs ...event) workflows.PublishBatchResult {
	t.Helper()
	in := workflows.PublishBatchInput{AggregateType: evs[0].AggregateType, AggregateID: evs[0].AggregateID,
		LoadCursor: true, Settings: true}
	for _, ev := range evs {
		in.Events = append(in.Events, workflows.EventRef{ID: ev.ID, Version: ev.Version, Type: "created"})
	}
	val, err := b.env(t).ExecuteActivity(workflows.PublishBatchActivity, in)
	require.NoError(t, err)
	var res workflows.PublishBatchResult
	require.NoError(t, val.Get(&res))
	return res
}

// A run that asks gets the worker's settings (defaults filled) and a batch
// cut to their size, whatever it sent; one that does not ask gets neither.
func TestPublishBatchAnswersWithSettings(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	b.settings = workflows.Settings{PublishBatchSize: 2, IdleTimeout: 3 * time.Second,
		Policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 4}}}
	var evs []event
	for range 3 {
		evs = append(evs, insert(t, b.db.Pool, "order", "o-1", row{}))
	}

	res := b.publishBatchAsking(t, evs...)
	require.Equal(t, 2, res.Published, "cut to the worker's batch size")
	require.Equal(t, &workflows.Settings{PublishBatchSize: 2, IdleTimeout: 3 * time.Second,
		MaxHistoryEvents: workflows.DefaultMaxHistoryEvents, MaxBlockedRefs: workflows.DefaultMaxBlockedRefs,
		Policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 4}}}, res.Settings)
	require.Equal(t, evs[0].ID, b.receive(t).MessageId)
	require.Equal(t, evs[1].ID, b.receive(t).MessageId)
	b.requireNoMessage(t)

	res, err := b.publishBatch(t, evs[2])
	require.NoError(t, err)
	require.Equal(t, 1, res.Published)
	require.Nil(t, res.Settings, "not asked")
}

// With the fast path off, a run that asks learns its cursor and settings
// and publishes nothing, without an error: it publishes on the regular path.
func TestPublishBatchFastPathOff(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	b.settings = workflows.Settings{PublishBatchSize: -1}
	e1 := insert(t, b.db.Pool, "order", "o-1", row{})
	b.mustPublish(t, e1)
	require.Equal(t, e1.ID, b.receive(t).MessageId)
	e2 := insert(t, b.db.Pool, "order", "o-1", row{})

	res := b.publishBatchAsking(t, e1, e2)
	require.Zero(t, res.Published)
	require.Equal(t, int64(1), res.Cursor)
	require.NotNil(t, res.Settings)
	require.Equal(t, -1, res.Settings.PublishBatchSize)
	b.requireNoMessage(t)
	require.Equal(t, "pending", readRow(t, b.db.Pool, e2.ID).Status)
}

// The cursor read answers with the settings when asked (a run whose first
// batch failed, or one continued as new).
func TestLoadCursorAnswersWithSettings(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	b.settings = workflows.Settings{MaxHistoryEvents: 500}
	env := b.env(t)
	val, err := env.ExecuteActivity(workflows.LoadCursorActivity, workflows.CursorInput{AggregateType: "order", AggregateID: "o-1", Settings: true})
	require.NoError(t, err)
	var res workflows.CursorResult
	require.NoError(t, val.Get(&res))
	require.NotNil(t, res.Settings)
	require.Equal(t, 500, res.Settings.MaxHistoryEvents)
	require.Equal(t, workflows.DefaultIdleTimeout, res.Settings.IdleTimeout)

	val, err = env.ExecuteActivity(workflows.LoadCursorActivity, workflows.CursorInput{AggregateType: "order", AggregateID: "o-1"})
	require.NoError(t, err)
	res = workflows.CursorResult{}
	require.NoError(t, val.Get(&res))
	require.Nil(t, res.Settings, "not asked")
}
