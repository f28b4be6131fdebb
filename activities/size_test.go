package activities_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
)

// jsonOf is a JSON string payload of exactly n bytes (as jsonb prints it).
func jsonOf(n int) string { return `"` + strings.Repeat("x", n-2) + `"` }

// setupLimit is setup with a publisher that sends at most limit bytes.
func setupLimit(t *testing.T, limit int) *bundle {
	t.Helper()
	b := setup(t, activities.Config{}, nil)
	pub := newPublisher(t, broker.Config{URL: b.mq.URL, Exchange: b.mq.Exchange, MaxMessageBytes: limit})
	acts, err := activities.New(activities.Config{Pool: b.db.Pool, Broker: newTarget(t, rabbitmq.Config{Publisher: pub})})
	require.NoError(t, err)
	b.acts = acts
	return b
}

// A payload over the limit is never sent and fails for good, with its size
// and the limit, so the workflow quarantines it at once instead of
// retrying it as an outage. The publisher carries on.
func TestPublishEventTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	b := setupLimit(t, 1024)
	big := insert(t, b.db.Pool, "order", "o-1", row{Payload: jsonOf(2000)})

	_, err := b.publish(t, big.input())

	appErr := appError(t, err)
	require.Equal(t, activities.ErrTypeTooLarge, appErr.Type())
	require.True(t, appErr.NonRetryable(), "the same payload never fits: quarantine at once")
	require.Contains(t, appErr.Error(), "is 2000 bytes, over the limit of 1024")
	r := readRow(t, b.db.Pool, big.ID)
	require.Equal(t, "pending", r.Status, "the workflow quarantines it")
	require.NotNil(t, r.LastError)
	require.Contains(t, *r.LastError, "is 2000 bytes, over the limit of 1024")
	b.requireNoMessage(t)

	small := insert(t, b.db.Pool, "order", "o-2", row{Payload: jsonOf(1024)})
	b.mustPublish(t, small)
	require.Equal(t, small.ID, b.receive(t).MessageId)
}

// The fast path publishes the events before an oversized one and stops at
// it with the same error; starting at it, it fails as PublishEvent does.
func TestPublishBatchStopsAtTooLarge(t *testing.T) {
	t.Parallel()
	b := setupLimit(t, 1024)
	first := insert(t, b.db.Pool, "order", "o-1", row{})
	big := insert(t, b.db.Pool, "order", "o-1", row{Payload: jsonOf(2000)})
	after := insert(t, b.db.Pool, "order", "o-1", row{})

	res, err := b.publishBatch(t, first, big, after)
	require.NoError(t, err)
	require.Equal(t, 1, res.Published)
	require.Contains(t, res.Stopped, "is 2000 bytes, over the limit of 1024")
	require.Equal(t, first.ID, b.receive(t).MessageId)
	b.requireNoMessage(t)
	require.Contains(t, *readRow(t, b.db.Pool, big.ID).LastError, "over the limit of 1024")

	_, err = b.publishBatch(t, big, after)
	appErr := appError(t, err)
	require.Equal(t, activities.ErrTypeTooLarge, appErr.Type())
	require.True(t, appErr.NonRetryable())
	b.requireNoMessage(t)
}
