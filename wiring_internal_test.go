package ferry

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/internal/testenv"
)

func TestWorkerEffects(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	routes, regs, err := workerEffects(EffectsConfig{}, db.Pool, nil)
	require.NoError(t, err)
	require.Nil(t, routes)
	require.Nil(t, regs)

	cfg, err := Config{Effects: EffectsConfig{
		Routes:      []string{"order.created=charge,email:confirmation", "order.cancelled=refund"},
		PaymentsURL: "http://127.0.0.1:1", SMTPAddress: "127.0.0.1:2",
	}}.WithDefaults()
	require.NoError(t, err)
	routes, regs, err = workerEffects(cfg.Effects, db.Pool, nil)
	require.NoError(t, err)
	require.Len(t, regs, 3, "the effect workflows, the payment and the e-mail activities")
	got := routes("order", "created")
	require.Len(t, got, 2)
	require.Equal(t, effects.PaymentWorkflowName, got[0].WorkflowType)
	require.Equal(t, effects.EmailWorkflowName, got[1].WorkflowType)
	require.Equal(t, "refund", routes("order", "cancelled")[0].Effect)
}
