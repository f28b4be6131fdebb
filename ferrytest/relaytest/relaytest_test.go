package relaytest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/outbox"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The relay runs in the test's process: in the publish-first lane it
// publishes without Temporal, and WaitPublished sees the broker's confirm.
func TestStartPublishes(t *testing.T) {
	t.Parallel()
	db, br := ferrytest.NewDB(t, ""), ferrytest.NewBroker(t, "")
	Start(t, Config{DB: db, Broker: br, Temporal: ferrytest.UnreachableTemporal(t),
		Config: ferry.Config{Lane: ferry.LanePublishFirst}, Roles: ferry.Roles{Poller: true}})

	ctx := t.Context()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	writer, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	w, err := writer.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "o-1", EventType: "created", Payload: []byte(`{"n": 1}`)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	got := ferrytest.WaitPublished(t, db.Pool, 30*time.Second, w.ID)
	require.Equal(t, "published", got[0].Status)
	d, ok := br.Get(t, 10*time.Second)
	require.True(t, ok, "the message is on the test's queue")
	require.Equal(t, w.ID.String(), d.MessageId)
	require.Equal(t, "order.created", d.RoutingKey)
	var body map[string]int
	require.NoError(t, json.Unmarshal(d.Body, &body))
	require.Equal(t, map[string]int{"n": 1}, body)
}
