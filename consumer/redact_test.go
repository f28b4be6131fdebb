package consumer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/consumer"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/redact"
)

// A handler error that quotes a sensitive payload value is parked with the
// value masked in the reason header, Result.Reason and the log; the parked
// body stays the original, for the operator who moves it back.
func TestParkReasonMasksSensitiveFields(t *testing.T) {
	t.Parallel()
	e := setup(t)
	red, err := redact.New([]string{"order.created:customer.email"})
	require.NoError(t, err)
	var res results
	cfg := e.config(func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		return fmt.Errorf("no account for %s", "ann.lee@example.com")
	})
	cfg.DeliveryLimit = 1
	cfg.Redact = red
	cfg.OnResult = res.add
	c := e.start(cfg)
	body := `{"id":"p1","customer":{"email":"ann.lee@example.com","tier":"gold"}}`
	e.publish(msg{id: "p1", aggregateID: "7", eventType: "created", version: 1, schema: 1, body: body})

	d := e.dead()
	require.Equal(t, "handler failed on all 2 deliveries; last error: handler: no account for [redacted]",
		d.Headers[consumer.HeaderParkedReason])
	require.Equal(t, body, string(d.Body))
	c.Stop()
	res.mu.Lock()
	last := res.all[len(res.all)-1]
	res.mu.Unlock()
	require.Equal(t, consumer.Parked, last.Outcome)
	require.NotContains(t, last.Reason, "ann.lee@example.com")
	require.Contains(t, e.logs.String(), "no account for [redacted]")
	require.NotContains(t, e.logs.String(), "ann.lee@example.com")
}
