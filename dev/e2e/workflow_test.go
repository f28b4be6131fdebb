package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

// runsOf lists the runs of a workflow ID, newest first.
func runsOf(t *testing.T, workflowID string) []enumspb.WorkflowExecutionStatus {
	t.Helper()
	resp, err := tclient.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: namespace,
		Query:     fmt.Sprintf("WorkflowId = '%s'", workflowID),
	})
	require.NoError(t, err)
	var out []enumspb.WorkflowExecutionStatus
	for _, ex := range resp.Executions {
		out = append(out, ex.Status)
	}
	return out
}

// A hot aggregate's workflow continues-as-new many times; order holds and
// nothing is lost or repeated across runs.
func TestContinueAsNewKeepsOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{maxHistory: 30}) // batches make a run's history short
	ctx := context.Background()

	// Rounds of ten, each delivered before the next: a signal each, so
	// the runs' histories grow even though each round is one batch.
	const rounds, perRound = 12, 10
	const n = rounds * perRound
	var msgs []amqp.Delivery
	for range rounds {
		for range perRound {
			_, err := e.commit(ctx, "hot", false)
			require.NoError(t, err)
		}
		got := e.br.Collect(t, perRound, 2*time.Minute)
		require.Len(t, got, perRound)
		msgs = append(msgs, got...)
	}
	require.Len(t, msgs, n)
	for i, m := range msgs {
		require.Equal(t, int64(i+1), m.Headers[broker.HeaderAggregateVersion], "delivery %d", i)
	}
	id := workflows.WorkflowID(e.aggType, "hot")
	waitFor(t, 10*time.Second, "continued-as-new runs to show in visibility", func() bool {
		runs := runsOf(t, id)
		cont := 0
		for _, s := range runs {
			if s == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				cont++
			}
		}
		return cont >= 2
	})
	_, extra := e.br.Get(t, 500*time.Millisecond)
	require.False(t, extra, "no duplicate across runs")
}

// An idle workflow completes; the next event starts a new run that resumes
// after the last delivered version.
func TestIdleWorkflowCompletesAndNextRunResumes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{idleTimeout: time.Second})
	ctx := context.Background()
	id := workflows.WorkflowID(e.aggType, "a")

	for range 3 {
		_, err := e.commit(ctx, "a", false)
		require.NoError(t, err)
	}
	require.Len(t, e.br.Collect(t, 3, time.Minute), 3)
	waitFor(t, 30*time.Second, "the idle workflow to complete", func() bool {
		d, err := tclient.DescribeWorkflowExecution(ctx, id, "")
		require.NoError(t, err)
		return d.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})

	for range 2 {
		_, err := e.commit(ctx, "a", false)
		require.NoError(t, err)
	}
	msgs := e.br.Collect(t, 2, time.Minute)
	require.Len(t, msgs, 2)
	require.Equal(t, int64(4), msgs[0].Headers[broker.HeaderAggregateVersion])
	require.Equal(t, int64(5), msgs[1].Headers[broker.HeaderAggregateVersion])
	require.GreaterOrEqual(t, len(runsOf(t, id)), 2, "a second run")
}

// refuseSignals makes signal-with-start fail for one workflow ID until
// allowed: a real client with a fault injected on the way out.
type refuseSignals struct {
	interceptor.ClientInterceptorBase
	id      string
	refuse  atomic.Bool
	refused atomic.Int64
}

func (r *refuseSignals) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &refuseOutbound{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, r: r}
}

type refuseOutbound struct {
	interceptor.ClientOutboundInterceptorBase
	r *refuseSignals
}

// ExecuteWorkflow is how a poller starts a one-shot run of an aggregate
// it has not dispatched recently: refused the same way.
func (o *refuseOutbound) ExecuteWorkflow(ctx context.Context, in *interceptor.ClientExecuteWorkflowInput) (client.WorkflowRun, error) {
	if in.Options.ID == o.r.id && o.r.refuse.Load() {
		o.r.refused.Add(1)
		return nil, fmt.Errorf("injected: start refused for %s", in.Options.ID)
	}
	return o.Next.ExecuteWorkflow(ctx, in)
}

func (o *refuseOutbound) SignalWithStartWorkflow(ctx context.Context, in *interceptor.ClientSignalWithStartWorkflowInput) (client.WorkflowRun, error) {
	if in.Options.ID == o.r.id && o.r.refuse.Load() {
		o.r.refused.Add(1)
		return nil, fmt.Errorf("injected: signal refused for %s", in.Options.ID)
	}
	return o.Next.SignalWithStartWorkflow(ctx, in)
}

// One aggregate whose signal Temporal refuses does not hold up the others
// in the same batches; its rows stay pending and flow once it is accepted.
func TestOneRefusedAggregateDoesNotStopTheBatch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := &refuseSignals{id: workflows.WorkflowID(e.aggType, "bad")}
	r.refuse.Store(true)
	pc, err := client.Dial(client.Options{HostPort: temporalAddr, Namespace: namespace, Logger: ferrytest.QuietLogger(), Interceptors: []interceptor.ClientInterceptor{r}})
	require.NoError(t, err)
	t.Cleanup(pc.Close)
	e.startFerry(t, ferryOpts{temporal: pc})
	ctx := context.Background()

	var mu sync.Mutex
	bad := map[string]bool{}
	for i := range 20 {
		agg := aggID(i % 4)
		if i%5 == 0 {
			agg = "bad"
		}
		id, err := e.commit(ctx, agg, false)
		require.NoError(t, err)
		mu.Lock()
		bad[id] = agg == "bad"
		mu.Unlock()
	}
	msgs := e.br.Collect(t, 16, time.Minute)
	require.Len(t, msgs, 16)
	for _, m := range msgs {
		require.False(t, bad[m.MessageId], "an event of the refused aggregate got through")
	}
	require.Positive(t, r.refused.Load())
	require.Equal(t, 4, e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = 'bad' AND status = 'pending' AND last_error LIKE '%injected%'`))

	r.refuse.Store(false)
	msgs = e.br.Collect(t, 4, time.Minute) // after the rows' backoff
	require.Len(t, msgs, 4)
	for i, m := range msgs {
		require.True(t, bad[m.MessageId])
		require.Equal(t, int64(i+1), m.Headers[broker.HeaderAggregateVersion])
	}
}
