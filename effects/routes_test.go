package effects_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/effects"
)

func TestRouter(t *testing.T) {
	t.Parallel()
	r, err := effects.NewRouter(effects.RouterConfig{
		Routes: map[string][]string{
			"order.created":   {"charge", "email:confirmation"},
			"order.cancelled": {"refund"},
			"order.shipped":   {"ship"},
		},
		Kinds:   map[string]effects.Kind{"ship": {WorkflowType: "acme.Ship", TaskQueue: "shipping"}},
		Payment: effects.PaymentParams{EscalateAfter: 30 * 60e9},
	})
	require.NoError(t, err)

	got := r.For("order", "created")
	require.Len(t, got, 2)
	require.Equal(t, "charge", got[0].Effect)
	require.Equal(t, effects.PaymentWorkflowName, got[0].WorkflowType)
	var p effects.PaymentParams
	require.NoError(t, json.Unmarshal(got[0].Params, &p))
	require.Equal(t, effects.PaymentParams{
		ReconcileInitial: effects.DefaultReconcileInitial, ReconcileMax: effects.DefaultReconcileMax,
		EscalateAfter: 30 * 60e9, KeyRetention: effects.DefaultKeyRetention, SendWindow: effects.DefaultSendWindow,
		AttemptTimeout: effects.DefaultAttemptTimeout,
	}, p)
	require.Equal(t, "email:confirmation", got[1].Effect)
	require.Equal(t, effects.EmailWorkflowName, got[1].WorkflowType)

	require.Equal(t, "refund", r.For("order", "cancelled")[0].Effect)
	require.Equal(t, "shipping", r.For("order", "shipped")[0].TaskQueue)
	require.Nil(t, r.For("order", "paid"))
	require.Nil(t, r.For("invoice", "created"))
	require.Equal(t, []string{"charge", "email", "refund", "ship"}, r.Kinds())

	// For returns a copy: a caller cannot change the routes.
	got[0].Effect = "changed"
	require.Equal(t, "charge", r.For("order", "created")[0].Effect)
}

func TestRouterRefuses(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg  effects.RouterConfig
		want string
	}{
		"unknown kind":        {effects.RouterConfig{Routes: map[string][]string{"order.created": {"teleport"}}}, `unknown kind "teleport"`},
		"email without arg":   {effects.RouterConfig{Routes: map[string][]string{"order.created": {"email"}}}, `needs an argument`},
		"twice":               {effects.RouterConfig{Routes: map[string][]string{"order.created": {"charge", "charge"}}}, `twice`},
		"bad name":            {effects.RouterConfig{Routes: map[string][]string{"order.created": {"Charge!"}}}, `lower case`},
		"bad event":           {effects.RouterConfig{Routes: map[string][]string{"order created": {"charge"}}}, `<aggregate_type>.<event_type>`},
		"escalate too late":   {effects.RouterConfig{Payment: effects.PaymentParams{EscalateAfter: 13 * 3600e9}}, `EscalateAfter`},
		"kind without type":   {effects.RouterConfig{Routes: map[string][]string{"a.b": {"x"}}, Kinds: map[string]effects.Kind{"x": {}}}, `WorkflowType is empty`},
		"reconcile max small": {effects.RouterConfig{Payment: effects.PaymentParams{ReconcileInitial: 10e9, ReconcileMax: 1e9}}, `ReconcileMax`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := effects.NewRouter(tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseRoutes(t *testing.T) {
	t.Parallel()
	routes, err := effects.ParseRoutes([]string{"order.created=charge, email:confirmation", "order.cancelled=refund; order.created=email:receipt"})
	require.NoError(t, err)
	require.Equal(t, map[string][]string{
		"order.created":   {"charge", "email:confirmation", "email:receipt"},
		"order.cancelled": {"refund"},
	}, routes)
	for _, bad := range []string{"order.created", "=charge", "order.created=", "order.created= , "} {
		_, err := effects.ParseRoutes([]string{bad})
		require.Error(t, err, bad)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ferry/charge/0193/charge", effects.IdempotencyKey("charge", "0193", "charge"))
	require.NotEqual(t, effects.IdempotencyKey("charge", "e1", "charge"), effects.IdempotencyKey("refund", "e1", "refund"))
}
