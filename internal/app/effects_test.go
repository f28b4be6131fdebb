package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/internal/app"
	"github.com/ferry-outbox/ferry/internal/testenv"
)

func TestEffectsConfigRefuses(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg  app.EffectsConfig
		want string
	}{
		"charge without provider": {app.EffectsConfig{Routes: []string{"order.created=charge"}}, "--payments-url"},
		"email without server":    {app.EffectsConfig{Routes: []string{"order.created=email:confirmation"}}, "--smtp-address"},
		"bad route":               {app.EffectsConfig{Routes: []string{"order.created"}}, "order.created=charge"},
		"unknown kind":            {app.EffectsConfig{Routes: []string{"order.created=fax"}}, `unknown kind "fax"`},
		"bad policy":              {app.EffectsConfig{EmailAmbiguous: "maybe"}, "resend or park"},
		"timeouts":                {app.EffectsConfig{PaymentsTimeout: time.Minute, PaymentAttemptTimeout: 30 * time.Second}, "shorter than the payment attempt timeout"},
		"escalate too late":       {app.EffectsConfig{PaymentEscalateAfter: 20 * time.Hour}, "EscalateAfter"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := app.Config{Effects: tc.cfg}.WithDefaults()
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestEffectsConfigNeverPrintsTheAPIKey(t *testing.T) {
	t.Parallel()
	cfg := app.Config{Effects: app.EffectsConfig{PaymentsURL: "http://127.0.0.1:1", PaymentsAPIKey: "sk_live_secret"}}
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%v", cfg.Effects), cfg.Redacted().String()} {
		require.NotContains(t, s, "sk_live_secret")
	}
	require.Contains(t, fmt.Sprintf("%+v", cfg), "PaymentsURL:http://127.0.0.1:1")
}

func TestWorkerEffects(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	routes, regs, err := app.WorkerEffects(app.EffectsConfig{}, db.Pool, nil)
	require.NoError(t, err)
	require.Nil(t, routes)
	require.Nil(t, regs)

	routes, regs, err = app.WorkerEffects(app.EffectsConfig{
		Routes:      []string{"order.created=charge,email:confirmation", "order.cancelled=refund"},
		PaymentsURL: "http://127.0.0.1:1", SMTPAddress: "127.0.0.1:2",
	}, db.Pool, nil)
	require.NoError(t, err)
	require.Len(t, regs, 3, "the effect workflows, the payment and the e-mail activities")
	got := routes("order", "created")
	require.Len(t, got, 2)
	require.Equal(t, effects.PaymentWorkflowName, got[0].WorkflowType)
	require.Equal(t, effects.EmailWorkflowName, got[1].WorkflowType)
	require.Equal(t, "refund", routes("order", "cancelled")[0].Effect)
}
