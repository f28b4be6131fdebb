package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/poller"
)

// refusingClient is the shared client, except that Temporal "refuses" every
// start and signal of workflow IDs ending in suffix as invalid, the answer
// a request that can never succeed gets (schema 0007 keeps the aggregate
// ids that made real ones out of the outbox, so a test has to say it).
type refusingClient struct {
	client.Client
	suffix string
}

func (c refusingClient) refuse(id string) error {
	if strings.HasSuffix(id, c.suffix) {
		return serviceerror.NewInvalidArgument(fmt.Sprintf("WorkflowId %q is not valid for this test", id))
	}
	return nil
}

func (c refusingClient) ExecuteWorkflow(ctx context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	if err := c.refuse(o.ID); err != nil {
		return nil, err
	}
	return c.Client.ExecuteWorkflow(ctx, o, wf, args...)
}

func (c refusingClient) SignalWithStartWorkflow(ctx context.Context, id, name string, arg any, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	if err := c.refuse(id); err != nil {
		return nil, err
	}
	return c.Client.SignalWithStartWorkflow(ctx, id, name, arg, o, wf, args...)
}

// Events whose start Temporal refuses as invalid are quarantined after
// three claims, with Temporal's reason, while other aggregates flow; they
// show in `ferry status`, `ferry blocked` and the metrics, and `ferry
// repair --action skip` gives them up in version order, audited. A row
// migration 0007 quarantined (an aggregate id Temporal cannot take) is
// listed and skipped the same way, without a call to Temporal.
func TestRefusedEventsAreQuarantinedListedAndSkipped(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	e.startFerry(t, ferryOpts{metrics: m, temporal: refusingClient{Client: tclient, suffix: "/BAD"}})

	bad1, err := e.commit(ctx, "BAD", false)
	require.NoError(t, err)
	bad2, err := e.commit(ctx, "BAD", false)
	require.NoError(t, err)
	good, err := e.commit(ctx, "GOOD", false)
	require.NoError(t, err)
	msgs := e.br.Collect(t, 1, time.Minute)
	require.Equal(t, good, msgs[0].MessageId)

	status := func(id string) (st, lastErr string, attempts int) {
		require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT status, coalesce(last_error, ''), attempts FROM outbox_events WHERE id = $1`, id).Scan(&st, &lastErr, &attempts))
		return st, lastErr, attempts
	}
	waitFor(t, time.Minute, "the refused events to be quarantined", func() bool {
		s1, _, _ := status(bad1)
		s2, _, _ := status(bad2)
		return s1 == "quarantined" && s2 == "quarantined"
	})
	_, lastErr, attempts := status(bad1)
	require.Equal(t, 3, attempts, "quarantined on the third claim")
	require.Contains(t, lastErr, "quarantined ("+poller.ErrClassTemporalRefused+")")
	require.Contains(t, lastErr, "is not valid for this test", "Temporal's reason")
	require.Equal(t, 2.0, ferrytest.Sample(t, reg, "ferry_events_quarantined_total", map[string]string{"event_type": "changed", "error_class": poller.ErrClassTemporalRefused}))

	// Schema 0007's follow-up quarantined a pending row whose aggregate id
	// Temporal cannot take; such a row can only be inserted quarantined now.
	var ctl string
	require.NoError(t, e.db.Pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, last_error)
		VALUES ($1, E'nul\u0001ctl', 'changed', '{}', 'quarantined', 'quarantined (InvalidAggregateID): aggregate_id has bytes outside printable ASCII')
		RETURNING id::text`, e.aggType).Scan(&ctl))

	env := []string{"FERRY_POSTGRES_URL=" + e.db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporalAddr, "FERRY_TEMPORAL_NAMESPACE=" + namespace}
	code, out := ferry(t, env, "blocked")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, e.aggType+"/BAD  v1  event "+bad1+" (changed)")
	require.Contains(t, out, e.aggType+"/BAD  v2  event "+bad2+" (changed)")
	require.Contains(t, out, e.aggType+`/"nul\x01ctl"  v1  event `+ctl)
	require.Contains(t, out, "quarantined without a workflow")
	require.Contains(t, out, poller.ErrClassTemporalRefused)
	require.Contains(t, out, "ferry repair "+bad1+" --action skip")

	code, out = ferry(t, env, "status")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "Quarantined without a workflow")
	require.Contains(t, out, "event "+bad1+" (changed), "+poller.ErrClassTemporalRefused)

	skip := func(id string) (int, string) {
		return ferry(t, env, "repair", id, "--action", "skip", "--reason", "the id is invalid", "--actor", "ops")
	}
	code, out = skip(bad2)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "v1 is not delivered yet")
	for _, id := range []string{bad1, bad2, ctl} {
		code, out = skip(id)
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "no workflow holds it")
		st, _, _ := status(id)
		require.Equal(t, "skipped", st)
	}
	code, out = skip(bad1)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "was applied before")
	require.Equal(t, 3, e.count(t, `SELECT count(*) FROM ferry_repairs WHERE action = 'skip' AND actor = 'ops' AND reason = 'the id is invalid'`))
	var delivered int64
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT delivered_version FROM outbox_aggregates WHERE aggregate_type = $1 AND aggregate_id = 'BAD'`, e.aggType).Scan(&delivered))
	require.Equal(t, int64(2), delivered)

	// (Other tests' workflows share the namespace: only this test's
	// aggregates are known to be gone.)
	code, out = ferry(t, env, "blocked")
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, e.aggType+"/")
	require.NotContains(t, out, "quarantined without a workflow")
}
