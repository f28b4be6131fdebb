package activities_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/workflows"
)

// A replay is audited before it is published: a request the audit refuses
// (an empty reason, sent to Temporal directly) publishes nothing, a row
// whose payload retention blanked is refused with an error that says so,
// and a replay publishes once per request id with the original message id.
func TestReplayEventAuditsBeforePublishing(t *testing.T) {
	t.Parallel()
	b := setup(t, activities.Config{}, nil)
	ctx := context.Background()
	ev := insert(t, b.db.Pool, "order", "r-1", row{})
	b.mustPublish(t, ev)
	_, ok := b.mq.Get(t, 5*time.Second)
	require.True(t, ok)
	replay := func(requestID, reason string) error {
		_, err := b.env(t).ExecuteActivity(workflows.ReplayActivity, workflows.ReplayEventInput{
			RequestID: requestID + "/" + ev.ID, EventID: ev.ID, Reason: reason, Actor: "ops"})
		return err
	}
	audits := func() int {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM ferry_repairs WHERE event_id = $1`, ev.ID).Scan(&n))
		return n
	}
	requireNotReplayable := func(err error, msg string) {
		t.Helper()
		var appErr *temporal.ApplicationError
		require.True(t, errors.As(err, &appErr), "got %v", err)
		require.Equal(t, activities.ErrTypeNotReplayable, appErr.Type())
		require.True(t, appErr.NonRetryable())
		require.ErrorContains(t, err, msg)
	}

	requireNotReplayable(replay("no-reason", ""), "nothing was published")
	_, got := b.mq.Get(t, 300*time.Millisecond)
	require.False(t, got, "a replay the audit refused was published")
	require.Zero(t, audits())

	require.NoError(t, replay("rp-1", "consumer lost its data"))
	d, ok := b.mq.Get(t, 5*time.Second)
	require.True(t, ok)
	require.Equal(t, ev.ID, d.MessageId)
	require.Equal(t, 1, audits())
	require.NoError(t, replay("rp-1", "consumer lost its data"))
	_, got = b.mq.Get(t, 300*time.Millisecond)
	require.False(t, got, "a repeated request was published again")

	_, err := b.db.Pool.Exec(ctx, `UPDATE outbox_events SET payload = 'null'::jsonb WHERE id = $1`, ev.ID)
	require.NoError(t, err)
	requireNotReplayable(replay("rp-2", "again"), "payload was blanked by payload retention")
	_, got = b.mq.Get(t, 300*time.Millisecond)
	require.False(t, got, "a blanked payload was replayed")
	require.Equal(t, 1, audits())
}
