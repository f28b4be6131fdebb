package workflows_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/workflows"
)

// After each publish the aggregate starts the routed effects as children
// with IDs from event id + effect, and the state counts them.
func TestAggregateStartsRoutedEffects(t *testing.T) {
	t.Parallel()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()

	var mu sync.Mutex
	var started []workflows.EffectInput
	var ids []string
	effect := func(ctx workflow.Context, in workflows.EffectInput) error {
		mu.Lock()
		defer mu.Unlock()
		started = append(started, in)
		ids = append(ids, workflow.GetInfo(ctx).WorkflowExecution.ID)
		return nil
	}
	env.RegisterWorkflowWithOptions(workflows.Aggregate, workflow.RegisterOptions{Name: workflows.AggregateWorkflowName})
	env.RegisterWorkflowWithOptions(effect, workflow.RegisterOptions{Name: "test.Effect"})
	env.RegisterActivityWithOptions(func(_ context.Context, in workflows.PublishInput) (workflows.PublishResult, error) {
		if in.Version == 2 {
			return workflows.PublishResult{}, nil // a type without routes
		}
		return workflows.PublishResult{Effects: []workflows.EffectStart{
			{Effect: "charge", WorkflowType: "test.Effect", Params: []byte(`{"x":1}`)},
			{Effect: "email:confirmation", WorkflowType: "test.Effect"},
		}}, nil
	}, activity.RegisterOptions{Name: workflows.PublishEventActivity})
	env.RegisterActivityWithOptions(func(context.Context, workflows.CursorInput) (workflows.CursorResult, error) {
		return workflows.CursorResult{}, nil
	}, activity.RegisterOptions{Name: workflows.LoadCursorActivity})

	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.EventsSignal, workflows.EventsSignalArg{Events: []workflows.EventRef{
			{ID: "e1", Version: 1, Type: "created"}, {ID: "e2", Version: 2, Type: "noted"},
		}})
	}, time.Second)
	var st workflows.State
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.StateQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&st))
	}, 30*time.Second)
	env.ExecuteWorkflow(workflows.AggregateWorkflowName, workflows.AggregateInput{AggregateType: "order", AggregateID: "o1", IdleTimeout: time.Minute})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	require.Equal(t, workflows.EffectCounts{Started: 2}, st.Effects)
	require.ElementsMatch(t, []string{"ferry-effect/charge/e1", "ferry-effect/email:confirmation/e1"}, ids)
	for _, in := range started {
		require.Equal(t, "e1", in.EventID)
		require.Equal(t, "order", in.AggregateType)
		require.Equal(t, "o1", in.AggregateID)
		require.Equal(t, int64(1), in.AggregateVersion)
		require.Equal(t, "created", in.EventType)
		if in.Effect == "charge" {
			require.JSONEq(t, `{"x":1}`, string(in.Params))
		}
	}
}

func TestEffectWorkflowID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ferry-effect/email:confirmation/0193", workflows.EffectWorkflowID("email:confirmation", "0193"))
}
