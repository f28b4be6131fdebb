package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/workflows"
)

// A payload over the broker's limit (16 MiB by default, RabbitMQ 4's
// max_message_size), written by a plain-SQL producer, is quarantined on its
// first attempt with its size and the limit, never retried as an outage,
// and every other aggregate keeps flowing.
func TestOversizedPayloadIsQuarantinedAtOnce(t *testing.T) {
	t.Parallel()
	e := setupPoison(t)
	ctx := context.Background()

	size := broker.DefaultMaxMessageBytes + 1
	var big string
	require.NoError(t, e.db.Pool.QueryRow(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'A', 'changed', to_jsonb(repeat('x', $2))) RETURNING id::text`, e.aggType, size-2).Scan(&big))
	after := e.mustCommit(t, "A", "changed")
	other := e.mustCommit(t, "B", "changed")

	e.waitStatus(t, big, "quarantined")
	_, lastErr := e.status(t, big)
	require.Contains(t, lastErr, "quarantined ("+activities.ErrTypeTooLarge+")")
	require.Contains(t, lastErr, fmt.Sprintf("is %d bytes, over the limit of %d", size, broker.DefaultMaxMessageBytes))

	wfA := workflows.WorkflowID(e.aggType, "A")
	waitBlocked(t, wfA, big)
	waitFor(t, 30*time.Second, "A in the dead-letter view as PayloadTooLarge", func() bool {
		ids := blockedIDs(t, fmt.Sprintf(" AND FerryBlockedEventId = '%s' AND FerryErrorClass = '%s'", big, activities.ErrTypeTooLarge))
		return len(ids) == 1 && ids[0] == wfA
	})

	// One attempt: non-retryable, so the policy's second attempt never ran.
	attempts := 0
	iter := tclient.GetWorkflowHistory(ctx, wfA, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if f := ev.GetActivityTaskFailedEventAttributes(); f != nil {
			require.Contains(t, f.GetFailure().GetMessage(), "over the limit of")
			require.True(t, f.GetFailure().GetApplicationFailureInfo().GetNonRetryable())
		}
		if s := ev.GetActivityTaskStartedEventAttributes(); s != nil {
			attempts = max(attempts, int(s.GetAttempt()))
		}
	}
	require.Equal(t, 1, attempts)

	// B flows; A's next event waits behind the quarantined one.
	d, ok := e.br.Get(t, time.Minute)
	require.True(t, ok)
	require.Equal(t, other, d.MessageId)
	status, _ := e.status(t, after)
	require.NotEqual(t, "published", status)
	require.False(t, strings.Contains(lastErr, broker.ErrUnavailable.Error()), "never an outage")
}
