package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// Aggregate ids outside ASCII (schema 0012): written with plain SQL and
// with the Go writer, relayed through the real server under their escaped
// workflow IDs, published in version order per aggregate with the id as
// written in the AMQP headers and in a workflow destination's envelope.
// An ASCII id that spells out an escape is another aggregate, with another
// workflow.
func TestUnicodeAggregateIDsAreDelivered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tq := startUserWorker(t, "E2EUnicodeRecorder")
	e.startFerry(t, ferryOpts{destinations: []string{
		fmt.Sprintf("%s.created=start:rec,type=E2EUnicodeRecorder,queue=%s,id=rec-{event_id}", e.aggType, tq),
	}})
	ctx := context.Background()

	sqlInsert := func(aggID, eventType string) string {
		t.Helper()
		var id string
		require.NoError(t, e.db.Pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, $2, $3, '{"via": "sql"}') RETURNING id::text`, e.aggType, aggID, eventType).Scan(&id))
		return id
	}
	goWrite := func(aggID string) string {
		t.Helper()
		tx, err := e.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		w, err := e.writer.Write(ctx, tx, outbox.Event{ID: uuid.Must(uuid.NewV7()), AggregateType: e.aggType, AggregateID: aggID,
			EventType: "changed", Payload: json.RawMessage(`{"via": "go"}`)})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		return w.ID.String()
	}
	tickets := strings.Repeat("🎫", 50) // 200 bytes: the longest id
	want := map[string][]string{       // aggregate id: its events in version order
		"müller":      {sqlInsert("müller", "created"), sqlInsert("müller", "changed")},
		"製品-7":        {goWrite("製品-7"), goWrite("製品-7")},
		"m~C3~BCller": {sqlInsert("m~C3~BCller", "changed")},
		tickets:       {goWrite(tickets)},
	}

	msgs := e.br.Collect(t, 6, 2*time.Minute)
	got := map[string][]string{}
	for _, m := range msgs {
		aggID, _ := m.Headers[broker.HeaderAggregateID].(string)
		got[aggID] = append(got[aggID], m.MessageId)
		require.Equal(t, int64(len(got[aggID])), m.Headers[broker.HeaderAggregateVersion], "%q in version order", aggID)
	}
	require.Equal(t, want, got, "each event once, under the id as written")

	for aggID, ids := range want {
		wf := workflows.WorkflowID(e.aggType, aggID)
		d, err := tclient.DescribeWorkflowExecution(ctx, wf, "")
		require.NoError(t, err, "the workflow of %q is %s", aggID, wf)
		require.Equal(t, workflows.AggregateWorkflowName, d.GetWorkflowExecutionInfo().GetType().GetName())
		require.Equal(t, len(ids), e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_type = $1 AND aggregate_id = $2 AND status = 'published'`, e.aggType, aggID))
		require.Equal(t, len(ids), e.count(t, `SELECT delivered_version FROM outbox_aggregates WHERE aggregate_type = $1 AND aggregate_id = $2`, e.aggType, aggID))
	}
	require.Equal(t, "ferry/"+e.aggType+"~/m~C3~BCller", workflows.WorkflowID(e.aggType, "müller"))
	require.Equal(t, "ferry/"+e.aggType+"/m~C3~BCller", workflows.WorkflowID(e.aggType, "m~C3~BCller"), "the ASCII id keeps its ID")
	require.Len(t, workflows.WorkflowID(e.aggType, tickets), 626, "the longest id's workflow ID (docs/schema.md)")

	r := waitRecorded(t, "rec-"+want["müller"][0], 1)
	require.Equal(t, "müller", r.Got[0].AggregateID, "the envelope carries the id as written")
	require.Equal(t, e.aggType+"/müller", r.Got[0].Aggregate())
}

// An aggregate outside ASCII blocked at a poison event is what any other
// is to an operator: `ferry blocked` names it and its workflow, Temporal's
// CLI describes and queries the workflow under its escaped ID (under the id
// as written there is no workflow), and `ferry repair` skips the event
// through the workflow. A row migration 0007 quarantined for an id that is
// deliverable now is sent by `ferry repair --action retry`.
func TestUnicodeAggregateRepairAndTemporalCLI(t *testing.T) {
	t.Parallel()
	cli := temporalCLI(t)
	e := setupPoison(t)
	ctx := context.Background()
	env := []string{"FERRY_POSTGRES_URL=" + e.db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporalAddr, "FERRY_TEMPORAL_NAMESPACE=" + namespace}

	poison := e.mustCommit(t, "müller", "poison")
	next := e.mustCommit(t, "müller", "changed")
	wf := workflows.WorkflowID(e.aggType, "müller")
	require.Equal(t, "ferry/"+e.aggType+"~/m~C3~BCller", wf)
	waitBlocked(t, wf, poison)

	code, out := ferry(t, env, "blocked")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, e.aggType+"/müller  v1  event "+poison+" (poison)")
	require.Contains(t, out, "in workflow "+wf)

	code, out = cliRun(t, cli, "temporal workflow describe -w '"+wf+"'", "")
	require.Zero(t, code, out)
	require.Contains(t, out, wf)
	require.Contains(t, out, "FerryBlockedEventId")
	st := queryState(t, cli, "temporal workflow query -w '"+wf+"' --name ferry.state")
	require.NotNil(t, st.Blocked)
	require.Equal(t, poison, st.Blocked.EventID)
	code, out = cliRun(t, cli, "temporal workflow describe -w 'ferry/"+e.aggType+"/müller'", "")
	require.NotZero(t, code, out)
	require.Contains(t, out, "workflow not found", "the id as written names no workflow: the escaped ID does")

	code, out = ferry(t, env, "repair", poison, "--action", "skip", "--reason", "obsolete", "--actor", "ops")
	require.Equal(t, 0, code, out)
	e.waitStatus(t, poison, "skipped")
	e.waitStatus(t, next, "published")
	m := e.br.Collect(t, 1, time.Minute)[0]
	require.Equal(t, next, m.MessageId)
	require.Equal(t, "müller", m.Headers[broker.HeaderAggregateID])
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM ferry_repairs WHERE event_id = $1 AND action = 'skip' AND actor = 'ops'`, poison))

	// A row 0007 quarantined, with the reason 0012 gave it.
	var held string
	require.NoError(t, e.db.Pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, last_error)
		VALUES ($1, 'kunde-ü', 'changed', '{}', 'quarantined',
		        'quarantined (InvalidAggregateID): aggregate_id has bytes outside printable ASCII, which Temporal refused in a workflow ID before migration 0012 (migration 0007 quarantined this row). Ferry delivers this id now.')
		RETURNING id::text`, e.aggType).Scan(&held))
	code, out = ferry(t, env, "blocked")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, e.aggType+"/kunde-ü  v1  event "+held)
	require.Contains(t, out, "quarantined without a workflow")
	code, out = ferry(t, env, "repair", held, "--action", "retry", "--reason", "deliverable since schema 0012", "--actor", "ops")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "no workflow holds it")
	e.waitStatus(t, held, "published")
	m = e.br.Collect(t, 1, time.Minute)[0]
	require.Equal(t, held, m.MessageId)
	require.Equal(t, "kunde-ü", m.Headers[broker.HeaderAggregateID])
}

// What a Temporal server on SQL persistence (here PostgreSQL) takes: its
// tables hold a workflow ID in VARCHAR(255), so a longer ID, under
// limit.maxIDLength as it is, gets no answer (PostgreSQL logs "value too
// long for type character varying(255)" and the frontend's call runs out
// of time). The ID of a long aggregate type and id, escaped or not, can
// pass that: docs/schema.md says so.
func TestSQLPersistenceTakesWorkflowIDsUpTo255Bytes(t *testing.T) {
	t.Parallel()
	pg := newTemporalPG(t, 1)
	srv := startPGTemporal(t, pg)
	signal := func(n int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		id := "ferry/t/" + strings.Repeat("x", n-len("ferry/t/"))
		_, err := srv.client.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal, nil,
			client.StartWorkflowOptions{TaskQueue: "nobody"}, workflows.AggregateWorkflowName)
		return err
	}
	require.NoError(t, signal(255))
	err := signal(256)
	require.ErrorAs(t, err, new(*serviceerror.DeadlineExceeded), "no answer, and no InvalidArgument either: %v", err)
}
