package effects_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/workflows"
)

// provider is a scripted stand-in for the payment activities: sends and
// lookups answer from queues (the last answer repeats).
type provider struct {
	mu      sync.Mutex
	sends   []effects.PaymentOutcome
	sendErr error
	lookups []effects.LookupResult
	nSend   int
	nLookup int
	keys    []string
}

func (p *provider) prepare(_ context.Context, in effects.PrepareInput) (effects.PaymentRequest, error) {
	return effects.PaymentRequest{Op: in.Op, Key: in.Key, Amount: 4200, Currency: "eur", Reference: "order/o1"}, nil
}

func (p *provider) send(_ context.Context, req effects.PaymentRequest) (effects.PaymentOutcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, req.Key)
	p.nSend++
	if p.sendErr != nil {
		return effects.PaymentOutcome{}, p.sendErr
	}
	return next(&p.sends), nil
}

func (p *provider) lookup(_ context.Context, req effects.PaymentRequest) (effects.LookupResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, req.Key)
	p.nLookup++
	return next(&p.lookups), nil
}

func next[T any](q *[]T) T {
	v := (*q)[0]
	if len(*q) > 1 {
		*q = (*q)[1:]
	}
	return v
}

func paymentEnv(t *testing.T, p *provider) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	effects.Workflows{}.Register(env)
	env.RegisterActivityWithOptions(p.prepare, activity.RegisterOptions{Name: effects.PreparePaymentActivity})
	env.RegisterActivityWithOptions(p.send, activity.RegisterOptions{Name: effects.SendPaymentActivity})
	env.RegisterActivityWithOptions(p.lookup, activity.RegisterOptions{Name: effects.LookupPaymentActivity})
	return env
}

func chargeInput(t *testing.T, params effects.PaymentParams) workflows.EffectInput {
	t.Helper()
	raw, err := json.Marshal(params)
	require.NoError(t, err)
	return workflows.EffectInput{Effect: "charge", EventID: "e1", EventType: "created", AggregateType: "order", AggregateID: "o1", AggregateVersion: 1, Params: raw}
}

var (
	unknown   = effects.PaymentOutcome{Status: effects.StatusUnknown, Message: "timeout after send"}
	succeeded = effects.PaymentOutcome{Status: effects.StatusSucceeded, ID: "ch_1", Amount: 4200, Currency: "eur"}
)

func runPayment(t *testing.T, env *testsuite.TestWorkflowEnvironment, in workflows.EffectInput) (effects.PaymentResult, error) {
	t.Helper()
	env.ExecuteWorkflow(effects.PaymentWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	if err := env.GetWorkflowError(); err != nil {
		return effects.PaymentResult{}, err
	}
	var res effects.PaymentResult
	require.NoError(t, env.GetWorkflowResult(&res))
	return res, nil
}

func TestPaymentSucceedsFirstTime(t *testing.T) {
	t.Parallel()
	p := &provider{sends: []effects.PaymentOutcome{succeeded}}
	res, err := runPayment(t, paymentEnv(t, p), chargeInput(t, effects.PaymentParams{}))
	require.NoError(t, err)
	require.Equal(t, effects.PaymentResult{Key: "ferry/charge/e1/charge", Outcome: succeeded, Sends: 1}, res)
	require.Equal(t, 0, p.nLookup)
}

func TestPaymentDeclinedIsTheResult(t *testing.T) {
	t.Parallel()
	declined := effects.PaymentOutcome{Status: effects.StatusDeclined, ID: "ch_9", Code: "card_declined"}
	p := &provider{sends: []effects.PaymentOutcome{declined}}
	res, err := runPayment(t, paymentEnv(t, p), chargeInput(t, effects.PaymentParams{}))
	require.NoError(t, err)
	require.Equal(t, declined, res.Outcome)
	require.Equal(t, 1, p.nSend)
	require.Equal(t, 0, p.nLookup)
}

// Unknown, the provider has it: the lookup's answer is the result and
// nothing is sent again.
func TestPaymentUnknownReconciledByLookup(t *testing.T) {
	t.Parallel()
	p := &provider{
		sends:   []effects.PaymentOutcome{unknown},
		lookups: []effects.LookupResult{{Result: effects.LookupInProgress}, {Result: effects.LookupFound, Outcome: succeeded}},
	}
	res, err := runPayment(t, paymentEnv(t, p), chargeInput(t, effects.PaymentParams{}))
	require.NoError(t, err)
	require.Equal(t, succeeded, res.Outcome)
	require.True(t, res.Reconciled)
	require.Equal(t, 1, res.Sends)
	require.Equal(t, 2, res.Lookups)
	require.Equal(t, 1, p.nSend)
	for _, k := range p.keys {
		require.Equal(t, "ferry/charge/e1/charge", k, "every request carries the same key")
	}
}

// Unknown, the provider never saw it: sent again with the same key.
func TestPaymentUnknownNeverSeenIsResent(t *testing.T) {
	t.Parallel()
	p := &provider{
		sends:   []effects.PaymentOutcome{unknown, succeeded},
		lookups: []effects.LookupResult{{Result: effects.LookupNotFound}},
	}
	res, err := runPayment(t, paymentEnv(t, p), chargeInput(t, effects.PaymentParams{}))
	require.NoError(t, err)
	require.Equal(t, succeeded, res.Outcome)
	require.Equal(t, 2, res.Sends)
	require.Equal(t, 1, res.Lookups)
	require.True(t, res.Reconciled)
}

// Still unknown after EscalateAfter: escalated (queryable), looked up at
// most every ReconcileMax, never re-sent on its own, until an operator
// settles it.
func TestPaymentStaysUnknownEscalates(t *testing.T) {
	t.Parallel()
	p := &provider{sends: []effects.PaymentOutcome{unknown}, lookups: []effects.LookupResult{{Result: effects.LookupInProgress}}}
	env := paymentEnv(t, p)
	params := effects.PaymentParams{ReconcileInitial: time.Second, ReconcileMax: time.Minute, EscalateAfter: 10 * time.Minute}
	var before, after effects.PaymentState
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(effects.StateQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&before))
	}, 5*time.Minute)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(effects.StateQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&after))
		env.SignalWorkflow(effects.ResolveSignal, effects.Resolution{Action: effects.ActionResolveSucceeded}) // rejected: no actor
		env.SignalWorkflow(effects.ResolveSignal, effects.Resolution{Action: effects.ActionResolveSucceeded, ID: "ch_77", Actor: "ops@example", Reason: "found in the provider's dashboard"})
	}, 3*time.Hour)
	res, err := runPayment(t, env, chargeInput(t, params))
	require.NoError(t, err)

	require.Equal(t, effects.PhaseReconciling, before.Phase)
	require.False(t, before.Escalated)
	require.Equal(t, effects.PhaseEscalated, after.Phase)
	require.True(t, after.Escalated)
	require.Equal(t, 1, after.Sends, "never re-sent while the provider says it is in flight")
	// 1+2+4+…+32 s, then a minute each: about 180 lookups in 3 h, never
	// more often than ReconcileMax.
	require.InDelta(t, 180, after.Lookups, 10)

	require.Equal(t, "ch_77", res.Outcome.ID)
	require.Equal(t, effects.StatusSucceeded, res.Outcome.Status)
	require.Equal(t, "ops@example", res.ResolvedBy)
	require.Equal(t, 1, p.nSend)
}

// Not seen by the provider but past half the key's retention: no re-send
// on its own (the provider may have forgotten the key and would charge
// again); an operator's resend uses the same key.
func TestPaymentNoResendLateInRetention(t *testing.T) {
	t.Parallel()
	p := &provider{sends: []effects.PaymentOutcome{unknown, succeeded}, lookups: []effects.LookupResult{{Result: effects.LookupInProgress}}}
	env := paymentEnv(t, p)
	params := effects.PaymentParams{ReconcileInitial: time.Minute, ReconcileMax: time.Hour, EscalateAfter: time.Hour, KeyRetention: 4 * time.Hour}
	env.RegisterDelayedCallback(func() {
		p.mu.Lock()
		p.lookups = []effects.LookupResult{{Result: effects.LookupNotFound}}
		p.mu.Unlock()
	}, 3*time.Hour)
	var st effects.PaymentState
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(effects.StateQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&st))
		env.SignalWorkflow(effects.ResolveSignal, effects.Resolution{Action: effects.ActionResend, Actor: "ops", Reason: "provider confirms it has no record"})
	}, 8*time.Hour)
	res, err := runPayment(t, env, chargeInput(t, params))
	require.NoError(t, err)
	require.Equal(t, 1, st.Sends)
	require.True(t, st.Escalated)
	require.Equal(t, succeeded, res.Outcome)
	require.Equal(t, 2, res.Sends)
}

func TestPaymentKeyMismatchFailsLoudly(t *testing.T) {
	t.Parallel()
	p := &provider{sendErr: temporal.NewNonRetryableApplicationError("same key, other parameters", effects.ErrTypeKeyMismatch, nil)}
	_, err := runPayment(t, paymentEnv(t, p), chargeInput(t, effects.PaymentParams{}))
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	require.Equal(t, effects.ErrTypeKeyMismatch, appErr.Type())
	require.Equal(t, 1, p.nSend)
}

func TestRefundUsesItsOwnKey(t *testing.T) {
	t.Parallel()
	p := &provider{sends: []effects.PaymentOutcome{{Status: effects.StatusSucceeded, ID: "re_1"}}}
	in := chargeInput(t, effects.PaymentParams{})
	in.Effect, in.EventID = "refund", "e2"
	res, err := runPayment(t, paymentEnv(t, p), in)
	require.NoError(t, err)
	require.Equal(t, "ferry/refund/e2/refund", res.Key)
	require.Equal(t, "re_1", res.Outcome.ID)
}
