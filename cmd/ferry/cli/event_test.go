package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/cmd/ferry/app"
	"github.com/ferry-outbox/ferry/redact"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/repairdb"
)

func TestEventLinksAndCommands(t *testing.T) {
	t.Parallel()
	var cfg app.Config
	cfg.Namespace, cfg.Temporal.Address = "default", "127.0.0.1:7233"
	require.Equal(t, "temporal workflow describe --workflow-id 'ferry/order/42'", describeCommand(cfg, "ferry/order/42"))
	require.Empty(t, uiLink(cfg, "ferry/order/42", "run-1"), "no UI without --temporal-ui-url")

	cfg.Namespace, cfg.Temporal.Address = "orders prod", "temporal:7233"
	require.Equal(t, `temporal workflow describe --workflow-id 'ferry/order/o'\''brien' --address 'temporal:7233' --namespace 'orders prod'`,
		describeCommand(cfg, "ferry/order/o'brien"), "quoted for a shell")

	cfg.TemporalUIURL = "https://ui.example.com/temporal"
	require.Equal(t, "https://ui.example.com/temporal/namespaces/orders%20prod/workflows/ferry%2Forder%2F42/run-1/history",
		uiLink(cfg, "ferry/order/42", "run-1"))
	require.Equal(t, "https://ui.example.com/temporal/namespaces/orders%20prod/workflows?query=WorkflowId+%3D+%22ferry%2Forder%2F42%22",
		uiLink(cfg, "ferry/order/42", ""), "without a run: the list of its runs")
}

func TestEventRedactsWhatQuotesThePayload(t *testing.T) {
	t.Parallel()
	red, err := redact.New([]string{"email"})
	require.NoError(t, err)
	payload := `{"email": "ann@example.com", "sku": "A-1"}`
	d := relaydb.Detail{ID: "0190f8a0-0000-7000-8000-000000000001", AggregateType: "order", AggregateID: "42", EventType: "created", Version: 3,
		Status: "quarantined", LastError: "quarantined (Unroutable): no route for ann@example.com", LastErrorClass: "Unroutable",
		Headers: map[string]string{"tenant": "acme", "email": "ann@example.com", "note": "for ann@example.com"}, Payload: payload}
	v := newEventView(red, d, []repairdb.AuditEntry{{ID: 7, Audit: repairdb.Audit{Action: "retry", Actor: "ops", Reason: "asked by ann@example.com",
		PayloadSHA256Before: "a", PayloadSHA256After: "a"}}})
	require.JSONEq(t, `{"email": "[redacted]", "sku": "A-1"}`, string(v.Payload))
	require.Equal(t, len(payload), v.PayloadBytes, "the stored payload's size, not the masked one's")
	require.Equal(t, "quarantined (Unroutable): no route for [redacted]", v.LastError)
	require.Equal(t, "Unroutable", v.ErrorClass)
	require.Equal(t, map[string]string{"tenant": "acme", "email": "[redacted]", "note": "for [redacted]"}, v.Headers)
	require.Equal(t, "asked by [redacted]", v.Audit[0].Reason)
	require.Nil(t, v.NextAttemptAt, "a quarantined row's next_attempt_at means nothing")

	var out bytes.Buffer
	v.Workflow = workflowView{ID: "ferry/order/42", Status: "Running", RunID: "run-1", BlockedAt: d.ID}
	v.Next = nextSteps(v, time.Now())
	renderEvent(&out, v, time.Now())
	for _, want := range []string{
		"event " + d.ID + ": order/42 v3, created (schema v0)",
		"last error     Unroutable: quarantined (Unroutable): no route for [redacted]",
		`headers        email="[redacted]" note="for [redacted]" tenant="acme"`,
		"workflow       ferry/order/42: Running (run run-1), blocked at event " + d.ID,
		`audit          #7 0001-01-01T00:00:00Z retry by ops: "asked by [redacted]" (payload unchanged; request )`,
		"after fixing the cause: ferry repair " + d.ID + " --action retry --reason '…'",
		"its workflow's run run-1 is blocked at it",
	} {
		require.Contains(t, out.String(), want)
	}
	require.NotContains(t, out.String(), "ann@example.com")
}

func TestEventNextSteps(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	later := now.Add(90 * time.Second)
	cases := []struct {
		name string
		v    eventView
		want string
	}{
		{"published", eventView{Status: "published", EventID: "e"}, "ferry replay --event e"},
		{"skipped", eventView{Status: "skipped"}, "given up"},
		{"delayed", eventView{Status: "pending", DeliverAfter: &later, NextAttemptAt: &later}, "delayed: not delivered before 2025-01-02T03:05:35Z (in 1m30s)"},
		{"held back", eventView{Status: "pending", NextAttemptAt: &later, LastError: "held: the aggregate is blocked at v2"}, "handed back by its blocked workflow"},
		{"retrying", eventView{Status: "pending", NextAttemptAt: &later, LastError: "signal: unavailable"}, "claims it again at 2025-01-02T03:05:35Z"},
		{"due", eventView{Status: "pending", NextAttemptAt: &now}, "check that a poller runs"},
		{"dispatched", eventView{Status: "dispatched", DispatchedAt: &now, AggregateDelivered: 4}, "delivered up to v4"},
		{"quarantined without a run", eventView{Status: "quarantined", Workflow: workflowView{none: true}}, "applies to the row directly"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, strings.Join(nextSteps(tc.v, now), "\n"), tc.want)
		})
	}
}
