package payment_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/effects/payment"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/internal/sandbox/payprovider"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// The Payment workflow with the real activities against the sandbox
// provider: the metrics count each answer, and "reconciled" only when a
// lookup settles an unknown outcome, not when a send's retry looks the key
// up.
func TestPaymentOutcomeMetrics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fault   payprovider.Fault
		counts  map[string]float64 // ferry_effect_outcomes_total{kind="charge"} by outcome
		lookups map[string]float64 // ferry_effect_payment_lookups_total by result
	}{
		{
			// 500 after the provider committed: unknown, then a lookup
			// finds the charge.
			name: "unknown reconciled by lookup", fault: payprovider.FaultErrorAfterCommit,
			counts:  map[string]float64{"unknown": 1, "reconciled": 1, "succeeded": 0},
			lookups: map[string]float64{"found": 1, "not_found": 0},
		},
		{
			// 429: the retry looks the key up first, finds nothing and
			// sends; nothing was unknown, nothing is reconciled.
			name: "retried send", fault: payprovider.FaultRateLimit,
			counts:  map[string]float64{"rate_limited": 1, "succeeded": 1, "unknown": 0, "reconciled": 0},
			lookups: map[string]float64{"found": 0, "not_found": 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, onFirstPost(tc.fault))
			db := ferrytest.NewDB(t, "")
			reg := prometheus.NewRegistry()
			m, err := payment.NewMetrics(reg)
			require.NoError(t, err)
			acts, err := payment.NewActivities(payment.ActivitiesConfig{Client: b.client, Pool: db.Pool, Metrics: m})
			require.NoError(t, err)

			var s testsuite.WorkflowTestSuite
			s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
			env := s.NewTestWorkflowEnvironment()
			effects.Workflows{}.Register(env)
			acts.Register(env)
			env.ExecuteWorkflow(effects.PaymentWorkflowName, workflows.EffectInput{
				Effect: effects.KindCharge, EventID: orderCreated(t, db), EventType: "created",
				AggregateType: "order", AggregateID: "o1", AggregateVersion: 1,
			})
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			var res effects.PaymentResult
			require.NoError(t, env.GetWorkflowResult(&res))
			require.Equal(t, effects.StatusSucceeded, res.Outcome.Status)
			require.Equal(t, tc.counts["reconciled"] == 1, res.Reconciled)
			require.Len(t, b.srv.Ledger().Charges, 1)

			for outcome, want := range tc.counts {
				require.Equal(t, want, ferrytest.Sample(t, reg, "ferry_effect_outcomes_total", map[string]string{"kind": "charge", "outcome": outcome}), "outcome %s", outcome)
			}
			for result, want := range tc.lookups {
				require.Equal(t, want, ferrytest.Sample(t, reg, "ferry_effect_payment_lookups_total", map[string]string{"result": result}), "lookup %s", result)
			}
		})
	}
}

// orderCreated commits an order.created event of 42.00 EUR and returns its
// id.
func orderCreated(t *testing.T, db *ferrytest.DB) string {
	t.Helper()
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	require.NoError(t, pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		_, err := w.Write(context.Background(), tx, outbox.Event{
			ID: id, AggregateType: "order", AggregateID: "o1", EventType: "created", Payload: []byte(`{"amount": 4200, "currency": "eur"}`),
		})
		return err
	}))
	return id.String()
}
