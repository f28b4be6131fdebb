package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/codec"
	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// Workflow destinations: Ferry starts and signals workflows of the user's
// own, from the publish path, through the real Temporal server.

// recorded is what recorderWorkflow has taken in: the envelopes in the
// order they came (a start's input first), and the repeats Dedup dropped.
type recorded struct {
	Got     []destination.Envelope
	Dropped int
}

const (
	recordedQuery = "recorded"
	recordSignal  = "paid"
)

// recorderWorkflow is a user's workflow as the docs write it: the
// envelope that started it (zero when signal-with-start started it), then
// every "paid" signal, repeats dropped with destination.Dedup.
func recorderWorkflow(ctx workflow.Context, first destination.Envelope) error {
	var (
		r    recorded
		seen destination.Dedup
	)
	if first.EventID != "" && seen.First(first) {
		r.Got = append(r.Got, first)
	}
	if err := workflow.SetQueryHandler(ctx, recordedQuery, func() (recorded, error) { return r, nil }); err != nil {
		return err
	}
	ch := workflow.GetSignalChannel(ctx, recordSignal)
	for {
		var ev destination.Envelope
		ch.Receive(ctx, &ev)
		if !seen.First(ev) {
			r.Dropped++
			continue
		}
		r.Got = append(r.Got, ev)
	}
}

// startUserWorker runs the user's worker on a task queue of its own, with
// recorderWorkflow registered under each of names.
func startUserWorker(t *testing.T, names ...string) string {
	t.Helper()
	tq := ferrytest.Name("user-tq")
	w := sdkworker.New(tclient, tq, sdkworker.Options{})
	for _, n := range names {
		w.RegisterWorkflowWithOptions(recorderWorkflow, workflow.RegisterOptions{Name: n})
	}
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return tq
}

// recordedBy queries a recorder workflow; ok is false while it is not
// there or not answering yet.
func recordedBy(t *testing.T, workflowID string) (recorded, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := tclient.QueryWorkflow(ctx, workflowID, "", recordedQuery)
	if err != nil {
		return recorded{}, false
	}
	var r recorded
	require.NoError(t, v.Get(&r))
	return r, true
}

func waitRecorded(t *testing.T, workflowID string, n int) recorded {
	t.Helper()
	var r recorded
	waitFor(t, time.Minute, fmt.Sprintf("%s to take in %d envelopes", workflowID, n), func() bool {
		var ok bool
		r, ok = recordedBy(t, workflowID)
		return ok && len(r.Got) >= n
	})
	return r
}

// listedRuns is runsOf once visibility, which trails the workflow's
// start, lists any run of the ID.
func listedRuns(t *testing.T, workflowID string) []enumspb.WorkflowExecutionStatus {
	t.Helper()
	var runs []enumspb.WorkflowExecutionStatus
	waitFor(t, 30*time.Second, workflowID+" listed by visibility", func() bool {
		runs = runsOf(t, workflowID)
		return len(runs) > 0
	})
	return runs
}

func versions(envs []destination.Envelope) []int64 {
	var out []int64
	for _, e := range envs {
		out = append(out, e.AggregateVersion)
	}
	return out
}

// An order's events start one workflow and signal it, in version order,
// beside the broker; an event type with broker=false reaches only its
// workflow, which signal-with-start started under an ID from the payload.
func TestWorkflowDestinationsStartAndSignal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tq := startUserWorker(t, "E2EFulfilment", "E2EAudit")
	e.startFerry(t, ferryOpts{destinations: []string{
		fmt.Sprintf("%s.created=start:fulfil,type=E2EFulfilment,queue=%s,id=fulfil-{aggregate_id}", e.aggType, tq),
		fmt.Sprintf("%s.paid=signal:fulfil,id=fulfil-{aggregate_id}", e.aggType),
		fmt.Sprintf("%s.noted=signal-with-start:audit,type=E2EAudit,queue=%s,id=audit-{aggregate_id}-{payload.order},signal=paid,broker=false", e.aggType, tq),
	}})
	ctx := context.Background()
	var ids []string
	for _, typ := range []string{"created", "paid", "paid", "noted"} {
		id, err := e.commitType(ctx, "A", typ, false)
		require.NoError(t, err)
		ids = append(ids, id)
	}

	r := waitRecorded(t, "fulfil-A", 3)
	require.Equal(t, []int64{1, 2, 3}, versions(r.Got), "the start's input first, then the signals in version order")
	require.Zero(t, r.Dropped)
	first := r.Got[0]
	require.Equal(t, destination.EnvelopeVersion, first.EnvelopeVersion)
	require.Equal(t, "fulfil", first.Destination)
	require.Equal(t, ids[0], first.EventID)
	require.Equal(t, "created", first.EventType)
	require.Equal(t, e.aggType, first.AggregateType)
	require.Equal(t, "A", first.AggregateID)
	require.Equal(t, 1, first.SchemaVersion)
	require.JSONEq(t, fmt.Sprintf(`{"order":%q}`, ids[0]), string(first.Payload))
	require.False(t, first.CreatedAt.IsZero())
	require.Equal(t, []string{ids[1], ids[2]}, []string{r.Got[1].EventID, r.Got[2].EventID})

	audit := waitRecorded(t, "audit-A-"+ids[3], 1)
	require.Equal(t, []int64{4}, versions(audit.Got), "signal-with-start started it without input, then signalled v4")
	require.Equal(t, "audit", audit.Got[0].Destination)

	for _, id := range ids {
		waitFor(t, time.Minute, "event "+id+" published", func() bool {
			return e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'published'`, id) == 1
		})
	}
	msgs := e.br.Collect(t, 3, time.Minute)
	require.Equal(t, ids[:3], []string{msgs[0].MessageId, msgs[1].MessageId, msgs[2].MessageId}, "created and paid also went to the broker, in order")
	if extra, ok := e.br.Get(t, time.Second); ok {
		t.Fatalf("the broker got %s (%s), but noted skips the broker", extra.MessageId, extra.Type)
	}
	require.Len(t, listedRuns(t, "fulfil-A"), 1)
}

// A repeat of a delivery changes nothing in Temporal: a start finds its
// workflow, and a signal with the same request id is dropped by the
// server; a repeat that comes another way (here under another destination
// name, so with another request id) is dropped by Dedup in the workflow.
func TestWorkflowDestinationRepeatsAreNoOps(t *testing.T) {
	t.Parallel()
	tq := startUserWorker(t, "E2ERecorder")
	aggType := ferrytest.Name("order")
	dests, err := destination.ParseAll([]string{
		fmt.Sprintf("%s.created=start:rec,type=E2ERecorder,queue=%s,id=rec-{aggregate_id}", aggType, tq),
		fmt.Sprintf("%s.paid=signal:rec,id=rec-{aggregate_id}", aggType),
		fmt.Sprintf("%s.paid=signal:again,id=rec-{aggregate_id}", aggType),
	})
	require.NoError(t, err)
	router, err := destination.NewRouter(dests)
	require.NoError(t, err)
	sender, err := destination.NewSender(destination.SenderConfig{Temporal: tclient, Namespace: namespace})
	require.NoError(t, err)
	ctx := context.Background()
	env := func(typ string, v int64) destination.Envelope {
		return destination.Envelope{EventID: fmt.Sprintf("0190e0e0-0000-7000-8000-%012d", v), EventType: typ,
			AggregateType: aggType, AggregateID: "R", AggregateVersion: v, SchemaVersion: 1, Payload: json.RawMessage(`{}`)}
	}
	starts, _ := router.For(aggType, "created")
	signals, _ := router.For(aggType, "paid")

	out, err := sender.Deliver(ctx, starts[0], env("created", 1))
	require.NoError(t, err)
	require.Equal(t, destination.Delivered, out)
	out, err = sender.Deliver(ctx, starts[0], env("created", 1))
	require.NoError(t, err)
	require.Equal(t, destination.Delivered, out, "a repeat of the same start gets the first one's answer")
	other := env("created", 1)
	other.EventID = "0190e0e0-0000-7000-8000-999999999999"
	out, err = sender.Deliver(ctx, starts[0], other)
	require.NoError(t, err)
	require.Equal(t, destination.Existed, out, "another event's start finds the workflow running")

	for range 3 {
		out, err = sender.Deliver(ctx, signals[0], env("paid", 2))
		require.NoError(t, err)
		require.Equal(t, destination.Delivered, out)
	}
	_, err = sender.Deliver(ctx, signals[1], env("paid", 2))
	require.NoError(t, err)
	_, err = sender.Deliver(ctx, signals[0], env("paid", 3))
	require.NoError(t, err)

	var r recorded
	waitFor(t, time.Minute, "v3 recorded", func() bool {
		var ok bool
		r, ok = recordedBy(t, "rec-R")
		return ok && len(r.Got) == 3
	})
	require.Equal(t, []int64{1, 2, 3}, versions(r.Got))
	require.Equal(t, 1, r.Dropped, "the server dropped two repeats of the signal (same request id); Dedup the one under another name")
	require.Len(t, listedRuns(t, "rec-R"), 1)

	// The server's answer to the workflow's history: one signal per
	// distinct request id.
	signalled := 0
	iter := tclient.GetWorkflowHistory(ctx, "rec-R", "", false, 0)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if ev.GetWorkflowExecutionSignaledEventAttributes() != nil {
			signalled++
		}
	}
	require.Equal(t, 3, signalled)
}

// A destination's failures are the publish path's: a signal to a
// workflow that is not running is retried (the row says why), quarantined
// when the policy's attempts run out, and delivered by `ferry repair
// retry` once the workflow runs; an event that does not fit its route's
// workflow ID template is quarantined at once, naming the field.
func TestWorkflowDestinationFailuresQuarantineAndRepair(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tq := startUserWorker(t, "E2EFulfilment")
	e.startFerry(t, ferryOpts{
		policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 2}},
		destinations: []string{
			fmt.Sprintf("%s.paid=signal:fulfil,id=fulfil-{aggregate_id}", e.aggType),
			fmt.Sprintf("%s.bad=start:fulfil,type=E2EFulfilment,queue=%s,id=fulfil-{payload.customer}", e.aggType, tq),
		},
	})
	pe := &poisonEnv{env: e}
	ctx := context.Background()

	paid := pe.mustCommit(t, "P", "paid")
	pe.waitStatus(t, paid, "quarantined")
	_, lastErr := pe.status(t, paid)
	require.Contains(t, lastErr, `workflow "fulfil-P": no such running workflow`)
	wf := workflows.WorkflowID(e.aggType, "P")
	waitBlocked(t, wf, paid)
	// Visibility follows the run's search attribute upsert asynchronously.
	waitFor(t, 30*time.Second, "the block in the UI's dead-letter view", func() bool {
		blocked := blockedIDs(t, fmt.Sprintf(" AND WorkflowId = '%s'", wf))
		return len(blocked) == 1 && blocked[0] == wf
	})

	// The operator starts the workflow, then retries: delivered, audited.
	_, err := tclient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "fulfil-P", TaskQueue: tq}, "E2EFulfilment", destination.Envelope{})
	require.NoError(t, err)
	_, err = repair(t, wf, workflows.RepairRequest{RequestID: "dest-retry-1", Action: "retry", EventID: paid, Actor: "ops", Reason: "fulfilment started"})
	require.NoError(t, err)
	pe.waitStatus(t, paid, "published")
	r := waitRecorded(t, "fulfil-P", 1)
	require.Equal(t, paid, r.Got[0].EventID)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM ferry_repairs WHERE request_id = 'dest-retry-1' AND action = 'retry'`))

	bad := pe.mustCommit(t, "Q", "bad")
	pe.waitStatus(t, bad, "quarantined")
	_, lastErr = pe.status(t, bad)
	require.Contains(t, lastErr, `{payload.customer}: the payload has no field "customer"`)
	waitFor(t, 30*time.Second, "Q blocked as BadDestination (non-retryable: not retried)", func() bool {
		v, err := tclient.QueryWorkflow(ctx, workflows.WorkflowID(e.aggType, "Q"), "", workflows.StateQuery)
		if err != nil {
			return false
		}
		var st workflows.State
		return v.Get(&st) == nil && st.Blocked != nil && st.Blocked.ErrorClass == "BadDestination"
	})
}

// Without RabbitMQ: events routed to workflows are delivered, an event
// type with no destination is quarantined with a reason, and no broker is
// touched (this test has none).
func TestNoBrokerDeployment(t *testing.T) {
	t.Parallel()
	e := setupOn(t, ferrytest.NewDB(t, ""), nil)
	tq := startUserWorker(t, "E2EFulfilment")
	e.startFerry(t, ferryOpts{noBroker: true, destinations: []string{
		fmt.Sprintf("%s.created=start:fulfil,type=E2EFulfilment,queue=%s,id=fulfil-{aggregate_id}", e.aggType, tq),
		fmt.Sprintf("%s.paid=signal:fulfil,id=fulfil-{aggregate_id}", e.aggType),
	}})
	pe := &poisonEnv{env: e}
	created := pe.mustCommit(t, "N", "created")
	paid := pe.mustCommit(t, "N", "paid")
	r := waitRecorded(t, "fulfil-N", 2)
	require.Equal(t, []string{created, paid}, []string{r.Got[0].EventID, r.Got[1].EventID})
	pe.waitStatus(t, created, "published")
	pe.waitStatus(t, paid, "published")

	// One SQL statement from any language starts the workflow too (the
	// docs' example).
	_, err := e.db.Pool.Exec(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'S', 'created', '{"total": 42}')`, e.aggType)
	require.NoError(t, err)
	s := waitRecorded(t, "fulfil-S", 1)
	require.JSONEq(t, `{"total": 42}`, string(s.Got[0].Payload))
	require.Nil(t, s.Got[0].Headers)

	// The producer's headers travel in the envelope.
	_, err = e.db.Pool.Exec(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ($1, 'H', 'created', '{}', '{"tenant": "acme", "Priority": "high"}')`, e.aggType)
	require.NoError(t, err)
	h := waitRecorded(t, "fulfil-H", 1)
	require.Equal(t, map[string]string{"tenant": "acme", "Priority": "high"}, h.Got[0].Headers)

	other := pe.mustCommit(t, "M", "shipped")
	pe.waitStatus(t, other, "quarantined")
	_, lastErr := pe.status(t, other)
	require.Contains(t, lastErr, "has no workflow destination and this worker publishes to no broker")
}

// The ferry command without a broker, its routes from a config file: ping
// checks PostgreSQL and Temporal only, run says where events go and starts
// the user's workflow, and neither touches the (unreachable) RabbitMQ URL.
func TestFerryCommandWithoutBroker(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tq := startUserWorker(t, "E2ECliFulfilment")
	cfgFile := filepath.Join(t.TempDir(), "ferry.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(fmt.Sprintf(
		"no-broker: true\ndestination: %s.created=start:fulfil,type=E2ECliFulfilment,queue=%s,id=cli-{aggregate_id}; %s.paid=signal:fulfil,id=cli-{aggregate_id}\n",
		e.aggType, tq, e.aggType)), 0o600))
	dead := "FERRY_AMQP_URL=amqp://guest:guest@" + ferrytest.ClosedAddr(t) + "/"

	ping := e.spawn(t, []string{"ping", "--config", cfgFile}, childEnv+"=1", dead)
	ping.waitExit(t, time.Minute)
	require.NoError(t, ping.err, ping.out.String())
	require.Contains(t, ping.out.String(), "ferry: PostgreSQL and Temporal answer (no broker: --no-broker)")

	run := e.spawn(t, []string{"run", "--config", cfgFile}, childEnv+"=1", dead)
	waitFor(t, time.Minute, "ferry run to start", func() bool {
		return strings.Contains(run.out.String(), "→ 2 workflow destination route(s) (no broker). Ctrl-C stops.")
	})
	ctx := context.Background()
	created, err := e.commitType(ctx, "C", "created", false)
	require.NoError(t, err)
	paid, err := e.commitType(ctx, "C", "paid", false)
	require.NoError(t, err)
	r := waitRecorded(t, "cli-C", 2)
	require.Equal(t, []string{created, paid}, []string{r.Got[0].EventID, r.Got[1].EventID})
	require.False(t, run.exited(), run.out.String())
}

// A producer's headers go through the real Ferry to both targets: the
// AMQP message, beside Ferry's own headers, and the workflow's envelope.
func TestHeadersReachBrokerAndWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tq := startUserWorker(t, "E2EHeaders")
	e.startFerry(t, ferryOpts{destinations: []string{
		fmt.Sprintf("%s.created=start:hdr,type=E2EHeaders,queue=%s,id=hdr-{aggregate_id}", e.aggType, tq),
	}})
	ctx := context.Background()
	tx, err := e.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	headers := map[string]string{"tenant": "acme", "Correlation-Id": "c-17"}
	w, err := e.writer.Write(ctx, tx, outbox.Event{AggregateType: e.aggType, AggregateID: "H", EventType: "created",
		Payload: json.RawMessage(`{}`), Headers: headers})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	msgs := e.br.Collect(t, 1, time.Minute)
	require.Len(t, msgs, 1)
	require.Equal(t, w.ID.String(), msgs[0].MessageId)
	require.Equal(t, "acme", msgs[0].Headers["tenant"])
	require.Equal(t, "c-17", msgs[0].Headers["Correlation-Id"])
	require.Equal(t, e.aggType, msgs[0].Headers["ferry-aggregate-type"], "Ferry's own headers are there too")
	r := waitRecorded(t, "hdr-H", 1)
	require.Equal(t, headers, r.Got[0].Headers)
}

// A signal repeated after its workflow took it and closed (a worker died
// between Temporal's answer and Ferry's mark) is a repeat: the server
// answers it as done when the closed run took it, and Ferry finds it in an
// earlier run's history when the workflow continued as new after taking
// it. A new event to the closed workflow still fails, to be retried.
func TestSignalRepeatedAfterTheWorkflowClosed(t *testing.T) {
	t.Parallel()
	tq := ferrytest.Name("user-tq")
	w := sdkworker.New(tclient, tq, sdkworker.Options{})
	// One signal, then done; with again, continue as new first and let
	// the new run complete at once.
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, again bool) error {
		if again {
			return nil
		}
		var ev destination.Envelope
		workflow.GetSignalChannel(ctx, recordSignal).Receive(ctx, &ev)
		if ev.AggregateID == "C" {
			return workflow.NewContinueAsNewError(ctx, "E2EOneSignal", true)
		}
		return nil
	}, workflow.RegisterOptions{Name: "E2EOneSignal"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	aggType := ferrytest.Name("order")
	dests, err := destination.ParseAll([]string{fmt.Sprintf("%s.paid=signal:once,id=once-{aggregate_id}", aggType)})
	require.NoError(t, err)
	router, err := destination.NewRouter(dests)
	require.NoError(t, err)
	routes, _ := router.For(aggType, "paid")
	sender, err := destination.NewSender(destination.SenderConfig{Temporal: tclient, Namespace: namespace})
	require.NoError(t, err)
	ctx := context.Background()
	env := func(agg string, v int64) destination.Envelope {
		return destination.Envelope{EventID: fmt.Sprintf("0190e0e0-0000-7000-8000-%s%011d", agg, v), EventType: "paid",
			AggregateType: aggType, AggregateID: agg, AggregateVersion: v, SchemaVersion: 1, Payload: json.RawMessage(`{}`)}
	}
	signals := func(id string) int {
		n := 0
		iter := tclient.GetWorkflowHistory(ctx, id, "", false, 0)
		for iter.HasNext() {
			ev, err := iter.Next()
			require.NoError(t, err)
			if ev.GetWorkflowExecutionSignaledEventAttributes() != nil {
				n++
			}
		}
		return n
	}

	for _, agg := range []string{"A", "C"} {
		id := "once-" + agg
		_, err = tclient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, "E2EOneSignal", false)
		require.NoError(t, err)
		out, err := sender.Deliver(ctx, routes[0], env(agg, 2))
		require.NoError(t, err)
		require.Equal(t, destination.Delivered, out)
		waitFor(t, time.Minute, id+" closed after its last run", func() bool {
			d, err := tclient.DescribeWorkflowExecution(ctx, id, "")
			return err == nil && d.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
		})

		out, err = sender.Deliver(ctx, routes[0], env(agg, 2))
		require.NoError(t, err, "%s took v2 before it closed: a repeat", id)
		if agg == "A" {
			require.Equal(t, destination.Delivered, out, "the closed run knows the request id: the server answers as done")
		} else {
			require.Equal(t, destination.Repeated, out, "the last run never saw it: found in the run it continued from")
		}

		_, err = sender.Deliver(ctx, routes[0], env(agg, 3))
		require.ErrorContains(t, err, "no such running workflow")
		require.NotErrorIs(t, err, destination.ErrPermanent, "retried: the workflow may be started again")
	}
	require.Equal(t, 0, signals("once-C"), "the last run of once-C took no signal")
	require.Equal(t, 1, signals("once-A"))
}

// With Ferry's payload codec on, what a destination receives is sealed
// like everything else Ferry writes into Temporal: the started workflow's
// input is encrypted in its history, and a worker with the same codec
// reads the envelope.
func TestDestinationEnvelopesAreSealedByTheCodec(t *testing.T) {
	t.Parallel()
	key, err := codec.ParseKey("e2e:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, codec.KeySize)))
	require.NoError(t, err)
	cdc, err := codec.New([]codec.Key{key})
	require.NoError(t, err)
	dc := codec.DataConverter(cdc)
	sealed, err := client.NewClientFromExisting(tclient, client.Options{Namespace: namespace, DataConverter: dc, Logger: ferrytest.QuietLogger()})
	require.NoError(t, err)
	t.Cleanup(sealed.Close)
	tq := ferrytest.Name("user-tq")
	w := sdkworker.New(sealed, tq, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(recorderWorkflow, workflow.RegisterOptions{Name: "E2ESealed"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	e := setup(t)
	e.startFerry(t, ferryOpts{dataConverter: dc, destinations: []string{
		fmt.Sprintf("%s.created=start:sealed,type=E2ESealed,queue=%s,id=sealed-{aggregate_id}", e.aggType, tq),
	}})
	ctx := context.Background()
	id, err := e.commitType(ctx, "S", "created", false)
	require.NoError(t, err)

	var r recorded
	waitFor(t, time.Minute, "the sealed workflow's envelope", func() bool {
		v, err := sealed.QueryWorkflow(ctx, "sealed-S", "", recordedQuery)
		return err == nil && v.Get(&r) == nil && len(r.Got) == 1
	})
	require.Equal(t, id, r.Got[0].EventID, "a worker with the codec reads the envelope")
	require.JSONEq(t, fmt.Sprintf(`{"order":%q}`, id), string(r.Got[0].Payload))

	iter := tclient.GetWorkflowHistory(ctx, "sealed-S", "", false, 0)
	ev, err := iter.Next()
	require.NoError(t, err)
	started := ev.GetWorkflowExecutionStartedEventAttributes()
	require.NotNil(t, started)
	for _, p := range started.GetInput().GetPayloads() {
		require.Equal(t, "binary/encrypted", string(p.GetMetadata()["encoding"]), "the input is sealed in the history")
		require.NotContains(t, string(p.GetData()), id, "no event id in clear")
	}
	for k, p := range started.GetMemo().GetFields() {
		require.Equal(t, "binary/encrypted", string(p.GetMetadata()["encoding"]), "memo %s is sealed", k)
	}
}
