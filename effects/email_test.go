package effects_test

import (
	"context"
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

type mailer struct {
	mu       sync.Mutex
	errs     []error // per call; nil: sent
	reqs     []effects.EmailRequest
	resolved []effects.EmailResolveInput
}

func (m *mailer) send(_ context.Context, req effects.EmailRequest) (effects.EmailResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, req)
	if len(m.errs) > 0 {
		err := m.errs[0]
		m.errs = m.errs[1:]
		if err != nil {
			return effects.EmailResult{}, err
		}
	}
	return effects.EmailResult{Status: effects.EmailSent, Key: req.Key, MessageID: "<m@x>"}, nil
}

func (m *mailer) resolve(_ context.Context, in effects.EmailResolveInput) (effects.EmailResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resolved = append(m.resolved, in)
	return effects.EmailResult{Status: in.Status, Key: in.Key}, nil
}

func emailEnv(m *mailer) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	effects.Workflows{}.Register(env)
	env.RegisterActivityWithOptions(m.send, activity.RegisterOptions{Name: effects.SendEmailActivity})
	env.RegisterActivityWithOptions(m.resolve, activity.RegisterOptions{Name: effects.ResolveEmailActivity})
	return env
}

var emailIn = workflows.EffectInput{Effect: "email:confirmation", EventID: "e1", EventType: "created", AggregateType: "order", AggregateID: "o1"}

// Ambiguous under the resend policy: retried with the same key until sent.
func TestEmailAmbiguousIsRetried(t *testing.T) {
	t.Parallel()
	m := &mailer{errs: []error{
		temporal.NewApplicationError("dropped after the final dot", effects.ErrTypeEmailAmbiguous),
		temporal.NewApplicationError("451", effects.ErrTypeNotSent),
	}}
	env := emailEnv(m)
	env.ExecuteWorkflow(effects.EmailWorkflowName, emailIn)
	require.NoError(t, env.GetWorkflowError())
	var res effects.EmailResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, effects.EmailSent, res.Status)
	require.Len(t, m.reqs, 3)
	for _, r := range m.reqs {
		require.Equal(t, "ferry/email:confirmation/e1/send", r.Key)
		require.Equal(t, "confirmation", r.Template)
	}
}

func TestEmailRejectedIsTheResult(t *testing.T) {
	t.Parallel()
	m := &mailer{errs: []error{temporal.NewNonRetryableApplicationError("554 refused", effects.ErrTypeEmailRejected, nil,
		effects.EmailResult{MessageID: "<m@x>", Attempts: 1, Reply: "554 refused"})}}
	env := emailEnv(m)
	env.ExecuteWorkflow(effects.EmailWorkflowName, emailIn)
	require.NoError(t, env.GetWorkflowError())
	var res effects.EmailResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, effects.EmailRejected, res.Status)
	require.Equal(t, "554 refused", res.Reply)
	require.Len(t, m.reqs, 1)
}

// Parked: escalated until an operator decides; "resend" sends with the
// same key and the Resend flag, "succeeded" records it in the ledger.
func TestEmailParkedWaitsForOperator(t *testing.T) {
	t.Parallel()
	for _, action := range []string{effects.ActionResend, effects.ActionResolveSucceeded} {
		t.Run(action, func(t *testing.T) {
			t.Parallel()
			m := &mailer{errs: []error{temporal.NewNonRetryableApplicationError("parked", effects.ErrTypeEmailParked, nil)}}
			env := emailEnv(m)
			var st effects.EmailState
			env.RegisterDelayedCallback(func() {
				v, err := env.QueryWorkflow(effects.StateQuery)
				require.NoError(t, err)
				require.NoError(t, v.Get(&st))
				env.SignalWorkflow(effects.ResolveSignal, effects.Resolution{Action: action, Actor: "ops", Reason: "checked the mailbox"})
			}, time.Hour)
			env.ExecuteWorkflow(effects.EmailWorkflowName, emailIn)
			require.NoError(t, env.GetWorkflowError())
			require.True(t, st.Escalated)
			require.Equal(t, effects.PhaseEscalated, st.Phase)
			var res effects.EmailResult
			require.NoError(t, env.GetWorkflowResult(&res))
			if action == effects.ActionResend {
				require.Len(t, m.reqs, 2)
				require.True(t, m.reqs[1].Resend)
				require.Equal(t, effects.EmailSent, res.Status)
			} else {
				require.Len(t, m.reqs, 1)
				require.Equal(t, effects.EmailMarkedSent, res.Status)
				require.Equal(t, []effects.EmailResolveInput{{Key: "ferry/email:confirmation/e1/send", Status: effects.EmailMarkedSent, Actor: "ops", Reason: "checked the mailbox"}}, m.resolved)
			}
		})
	}
}
