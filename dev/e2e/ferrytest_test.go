package e2e

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	ferryoutbox "github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/relaytest"
	"github.com/ferry-outbox/ferry/outbox"
)

// The test kit's relay in the workflow lane, on a Temporal server the test
// provides (this binary's embedded one): RequireManyWritten sees what the
// transaction wrote before it commits, the poller starts the aggregate's
// workflow, the worker publishes, WaitPublished sees the confirms, and the
// messages reach the test's queue in version order.
func TestFerrytestRelayOnTemporal(t *testing.T) {
	t.Parallel()
	db, br := ferrytest.NewDB(t, ""), ferrytest.NewBroker(t, "")
	relaytest.Start(t, relaytest.Config{DB: db, Broker: br, Temporal: tclient, Config: ferryoutbox.Config{Namespace: namespace}})

	ctx := t.Context()
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	written, err := w.WriteBatch(ctx, tx, []outbox.Event{
		{AggregateType: "order", AggregateID: "o-1", EventType: "created", Payload: []byte(`{"total_cents": 4200}`)},
		{AggregateType: "order", AggregateID: "o-1", EventType: "paid", Payload: []byte(`{}`)},
	})
	require.NoError(t, err)
	ferrytest.RequireManyWritten(ctx, t, tx, []ferrytest.Expected{
		{AggregateType: "order", AggregateID: "o-1", EventType: "created", Payload: `{"total_cents": 4200}`},
		{AggregateType: "order", AggregateID: "o-1", EventType: "paid"},
	})
	require.NoError(t, tx.Commit(ctx))

	ids := []uuid.UUID{written[0].ID, written[1].ID}
	ferrytest.WaitPublished(t, db.Pool, time.Minute, ids...)
	msgs := br.Collect(t, 2, 10*time.Second)
	require.Len(t, msgs, 2)
	require.Equal(t, []string{ids[0].String(), ids[1].String()}, []string{msgs[0].MessageId, msgs[1].MessageId})
}
