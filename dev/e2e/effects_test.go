package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/effects/email"
	"github.com/ferry-outbox/ferry/effects/payment"
	"github.com/ferry-outbox/ferry/internal/sandbox/payprovider"
	"github.com/ferry-outbox/ferry/internal/sandbox/smtpsink"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

// effectsEnv is a test's Ferry with effects: order.created charges and
// sends a confirmation, order.cancelled refunds, against a sandbox payment
// provider and an SMTP sink on loopback.
type effectsEnv struct {
	*env
	provider *payprovider.Server
	sink     *smtpsink.Server
}

type effectsOpts struct {
	payment     effects.PaymentParams
	emailPolicy string
	// clientTimeout of the payment client; default 1s (slow faults answer
	// after 3s).
	clientTimeout time.Duration
	noFerry       bool // only the sandboxes (a child process runs Ferry)
	// slowDelay of the provider's slow faults; default 3s.
	slowDelay time.Duration
	// publishBatch is the worker's PublishBatchSize; -1: the regular path.
	publishBatch int
	// startMode is the poller's StartMode; default one-shot.
	startMode string
}

func setupEffects(t *testing.T, o effectsOpts) *effectsEnv {
	t.Helper()
	e := &effectsEnv{env: setup(t)}
	ctx := context.Background()
	var err error
	e.provider, err = payprovider.New(payprovider.Config{SlowDelay: cmp.Or(o.slowDelay, 3*time.Second)})
	require.NoError(t, err)
	require.NoError(t, e.provider.Start(ctx))
	t.Cleanup(e.provider.Stop)
	e.sink, err = smtpsink.New(smtpsink.Config{})
	require.NoError(t, err)
	require.NoError(t, e.sink.Start(ctx))
	t.Cleanup(e.sink.Stop)
	if o.noFerry {
		return e
	}

	if o.payment.ReconcileInitial == 0 {
		o.payment.ReconcileInitial = 200 * time.Millisecond
	}
	if o.payment.ReconcileMax == 0 {
		o.payment.ReconcileMax = 2 * time.Second
	}
	if o.payment.AttemptTimeout == 0 {
		o.payment.AttemptTimeout = 10 * time.Second
	}
	router, err := effects.NewRouter(effects.RouterConfig{
		Routes: map[string][]string{
			e.aggType + ".created":   {"charge", "email:confirmation"},
			e.aggType + ".cancelled": {"refund"},
		},
		Payment: o.payment,
	})
	require.NoError(t, err)
	client, err := payment.New(payment.Config{BaseURL: e.provider.URL(), Timeout: max(o.clientTimeout, time.Second)})
	require.NoError(t, err)
	payActs, err := payment.NewActivities(payment.ActivitiesConfig{Client: client, Pool: e.db.Pool})
	require.NoError(t, err)
	mailActs, err := email.NewActivities(email.Config{Pool: e.db.Pool, SMTPAddress: e.sink.Addr(), From: "shop@example.com",
		Ambiguous: o.emailPolicy, Timeout: 5 * time.Second})
	require.NoError(t, err)

	pub, err := broker.New(broker.Config{URL: e.br.URL, Exchange: e.br.Exchange, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	target, err := rabbitmq.New(rabbitmq.Config{Publisher: pub})
	require.NoError(t, err)
	acts, err := activities.New(activities.Config{Pool: e.db.Pool, Broker: target, Effects: router.For})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{Temporal: tclient, Activities: acts, TaskQueue: e.taskQueue,
		Effects: []worker.Registrar{effects.Workflows{}, payActs, mailActs}, MaxConcurrentActivities: 200,
		Workflow: workflows.Settings{PublishBatchSize: o.publishBatch}})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	p, err := poller.New(poller.Config{Pool: e.db.Pool, Temporal: tclient, TaskQueue: e.taskQueue, PollInterval: 200 * time.Millisecond,
		StartMode: o.startMode,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(p.Stop)
	return e
}

// order commits an order event with the amount and the customer's address
// in its payload, and returns the event id.
func (e *effectsEnv) order(t *testing.T, aggID, eventType string, amount int64) string {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	payload, _ := json.Marshal(map[string]any{"amount": amount, "currency": "eur", "email": aggID + "@example.com"})
	require.NoError(t, pgx.BeginFunc(context.Background(), e.db.Pool, func(tx pgx.Tx) error {
		_, err := e.writer.Write(context.Background(), tx, outbox.Event{ID: id, AggregateType: e.aggType, AggregateID: aggID, EventType: eventType, Payload: payload})
		return err
	}))
	return id.String()
}

func chargeKey(eventID string) string { return effects.IdempotencyKey("charge", eventID, "charge") }

func emailMessageID(eventID string) string {
	return email.MessageID(effects.IdempotencyKey("email:confirmation", eventID, "send"), "ferry.local")
}

// result waits for an effect workflow's result.
func result[T any](t *testing.T, effect, eventID string, timeout time.Duration) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	waitFor(t, timeout, "effect "+effect+" of event "+eventID+" to start", func() bool {
		_, err := tclient.DescribeWorkflowExecution(ctx, workflows.EffectWorkflowID(effect, eventID), "")
		return err == nil
	})
	var res T
	require.NoError(t, tclient.GetWorkflow(ctx, workflows.EffectWorkflowID(effect, eventID), "").Get(ctx, &res),
		"effect %s of event %s", effect, eventID)
	return res
}

// chargesByKey counts the provider's charges per idempotency key.
func (e *effectsEnv) chargesByKey() map[string][]payprovider.Charge {
	out := map[string][]payprovider.Charge{}
	for _, c := range e.provider.Ledger().Charges {
		out[c.IdempotencyKey] = append(out[c.IdempotencyKey], c)
	}
	return out
}

// resetToFirstTask resets a workflow to its first completed workflow task:
// everything it did after that runs again, as after an operator's reset.
func resetToFirstTask(t *testing.T, workflowID string) string {
	t.Helper()
	return resetAfter(t, workflowID, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED)
}

// resetAfter resets a workflow to the first workflow task completed after
// the first event of type after: that task, and all that followed, run
// again.
func resetAfter(t *testing.T, workflowID string, after enumspb.EventType) string {
	t.Helper()
	ctx := context.Background()
	iter := tclient.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var first int64
	seen := false
	for iter.HasNext() && first == 0 {
		ev, err := iter.Next()
		require.NoError(t, err)
		if ev.GetEventType() == after {
			seen = true
		}
		if seen && ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			first = ev.GetEventId()
		}
	}
	require.NotZero(t, first, "no completed workflow task in %s", workflowID)
	return resetTo(t, workflowID, first, "e2e: reset to before the effect")
}

// resetTo resets workflowID to its completed workflow task finishedID and
// returns the new run's id.
func resetTo(t *testing.T, workflowID string, finishedID int64, reason string) string {
	t.Helper()
	resp, err := tclient.ResetWorkflowExecution(context.Background(), &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 namespace,
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: workflowID},
		Reason:                    reason,
		WorkflowTaskFinishEventId: finishedID,
		RequestId:                 uuid.NewString(),
	})
	require.NoError(t, err)
	return resp.GetRunId()
}

// resetToTaskBefore resets workflowID to the completed workflow task that
// issued the first event of type before, and returns the new run's id.
func resetToTaskBefore(t *testing.T, workflowID string, before enumspb.EventType) string {
	t.Helper()
	ctx := context.Background()
	iter := tclient.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var task int64
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			task = ev.GetEventId()
		}
		if ev.GetEventType() == before {
			break
		}
	}
	require.NotZero(t, task, "no completed workflow task before %s in %s", before, workflowID)
	return resetTo(t, workflowID, task, "e2e: reset to the task that started the effects")
}

// executions counts the runs of a workflow ID the server knows.
func executions(t *testing.T, workflowID string) int {
	t.Helper()
	resp, err := tclient.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: namespace,
		Query:     fmt.Sprintf("WorkflowId = %q", workflowID),
	})
	require.NoError(t, err)
	return len(resp.GetExecutions())
}

func hash(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// Issue test 1, scaled to 200 events in about a minute: every charge meets
// a fault on its first request (timeouts after the provider committed, 500
// after commit, resets after commit, drops before, 429, a key held in
// flight) and some lookups fail; e-mails meet 451s and drops after DATA;
// then some payment workflows are reset to before the charge and run it
// again. The provider's ledger shows exactly one charge per key, each
// workflow's result names that charge, and e-mail duplicates stay within
// the injected drops.
func TestEffectsExactlyOnceUnderFaults(t *testing.T) {
	t.Parallel()
	const n = 200
	e := setupEffects(t, effectsOpts{})
	postFaults := []payprovider.Fault{
		payprovider.FaultNone, payprovider.FaultSlowAfterCommit, payprovider.FaultErrorAfterCommit,
		payprovider.FaultDropAfterCommit, payprovider.FaultDropBeforeCommit, payprovider.FaultRateLimit, payprovider.FaultStall,
	}
	e.provider.SetFaults(func(r payprovider.Request) payprovider.Fault {
		switch {
		case r.Method == "POST" && r.Seen == 0:
			return postFaults[hash(r.Key)%uint32(len(postFaults))]
		case r.Method == "GET" && r.Seen == 0 && hash(r.Key)%3 == 0:
			return payprovider.FaultError
		}
		return payprovider.FaultNone
	})
	e.sink.SetFaults(func(a smtpsink.Attempt) smtpsink.Fault {
		if a.Seen > 0 {
			return smtpsink.FaultNone
		}
		return []smtpsink.Fault{smtpsink.FaultNone, smtpsink.FaultTempFail, smtpsink.FaultDropAfterData}[hash(a.MessageID)%3]
	})

	start := time.Now()
	amounts := map[string]int64{}
	var ids []string
	for i := range n {
		amount := int64(1000 + i)
		id := e.order(t, aggID(i%50), "created", amount)
		amounts[id] = amount
		ids = append(ids, id)
	}
	waitFor(t, 3*time.Minute, "a charge for every event", func() bool { return len(e.chargesByKey()) == n })
	waitFor(t, 3*time.Minute, "an e-mail for every event", func() bool { return len(e.sink.ByMessageID()) == n })

	reconciled, sends, lookups := 0, 0, 0
	for _, id := range ids {
		res := result[effects.PaymentResult](t, "charge", id, 2*time.Minute)
		charges := e.chargesByKey()[chargeKey(id)]
		require.Len(t, charges, 1, "charges with the key of event %s", id)
		require.Equal(t, effects.StatusSucceeded, res.Outcome.Status, "event %s: %+v", id, res)
		require.Equal(t, charges[0].ID, res.Outcome.ID, "the workflow's result names the ledger's charge (event %s)", id)
		require.Equal(t, amounts[id], charges[0].Amount)
		if res.Reconciled {
			reconciled++
		}
		sends += res.Sends
		lookups += res.Lookups
	}
	elapsed := time.Since(start)

	// An operator resets some payment workflows to before the charge: they
	// run again, with the same key, and charge nothing more.
	for _, id := range ids[:10] {
		resetToFirstTask(t, workflows.EffectWorkflowID("charge", id))
	}
	for _, id := range ids[:10] {
		res := result[effects.PaymentResult](t, "charge", id, time.Minute)
		require.Equal(t, e.chargesByKey()[chargeKey(id)][0].ID, res.Outcome.ID)
	}
	require.Len(t, e.provider.Ledger().Charges, n, "exactly one charge per key, resets included")
	for key, charges := range e.chargesByKey() {
		require.Len(t, charges, 1, "key %s", key)
	}

	for _, id := range ids {
		res := result[effects.EmailResult](t, "email:confirmation", id, time.Minute)
		require.Equal(t, effects.EmailSent, res.Status)
		require.Equal(t, emailMessageID(id), res.MessageID)
	}
	byID := e.sink.ByMessageID()
	duplicates := 0
	for _, c := range byID {
		duplicates += c - 1
	}
	drops := e.sink.Injected()[smtpsink.FaultDropAfterData]
	require.LessOrEqual(t, duplicates, drops)
	require.Positive(t, drops)

	injected := e.provider.Injected()
	require.Positive(t, injected[payprovider.FaultSlowAfterCommit])
	require.Positive(t, reconciled)
	t.Logf("%d events in %s: %d charges, one per key; provider faults %v; %d payments reconciled after an unknown outcome, %d sends, %d lookups, %d POSTs; 10 workflows reset and re-run without a charge; e-mail: %d distinct, %d duplicates ≤ %d drops after DATA, %d 451s",
		n, elapsed.Round(time.Second), len(e.provider.Ledger().Charges), injected, reconciled, sends, lookups, e.provider.Posts(),
		len(byID), duplicates, drops, e.sink.Injected()[smtpsink.FaultTempFail])
}

// Issue test 2: a response lost after the provider committed is reconciled
// from the provider's record without a second request; a request that
// never arrived is sent again with the same key. Either way, one charge.
func TestUnknownPaymentReconciledWithoutSecondCharge(t *testing.T) {
	t.Parallel()
	e := setupEffects(t, effectsOpts{})
	var mu sync.Mutex
	faultOf := map[string]payprovider.Fault{}
	e.provider.SetFaults(func(r payprovider.Request) payprovider.Fault {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == "POST" && r.Seen == 0 {
			return faultOf[r.Key]
		}
		return payprovider.FaultNone
	})
	committed := e.order(t, "lost-answer", "created", 4200)
	never := e.order(t, "never-arrived", "created", 1700)
	mu.Lock()
	faultOf[chargeKey(committed)] = payprovider.FaultSlowAfterCommit
	faultOf[chargeKey(never)] = payprovider.FaultDropBeforeCommit
	mu.Unlock()

	res := result[effects.PaymentResult](t, "charge", committed, time.Minute)
	require.True(t, res.Reconciled)
	require.Equal(t, 1, res.Sends, "reconciled by lookup, not by sending again")
	require.Positive(t, res.Lookups)
	require.Len(t, e.chargesByKey()[chargeKey(committed)], 1)
	require.Equal(t, e.chargesByKey()[chargeKey(committed)][0].ID, res.Outcome.ID)

	res2 := result[effects.PaymentResult](t, "charge", never, time.Minute)
	require.True(t, res2.Reconciled)
	require.Equal(t, 2, res2.Sends, "the provider never saw it: sent again with the same key")
	require.Len(t, e.chargesByKey()[chargeKey(never)], 1)
	require.Equal(t, int64(1700), e.chargesByKey()[chargeKey(never)][0].Amount)
	require.Len(t, e.provider.Ledger().Charges, 2)
}

// Issue test 2, second half: an outcome that stays unknown (the provider
// answers 500 to everything after committing) escalates: FerryBlocked in
// the UI's list, the state query says so, and nothing is dropped. Once the
// provider answers again the next lookup settles it and the flag clears.
func TestUnknownPaymentEscalatesVisibly(t *testing.T) {
	t.Parallel()
	e := setupEffects(t, effectsOpts{payment: effects.PaymentParams{EscalateAfter: 3 * time.Second}})
	e.provider.SetFaults(func(r payprovider.Request) payprovider.Fault {
		if r.Method == "POST" && r.Seen == 0 {
			return payprovider.FaultErrorAfterCommit
		}
		return payprovider.FaultError
	})
	id := e.order(t, "stuck", "created", 990)
	wfID := workflows.EffectWorkflowID("charge", id)
	waitFor(t, time.Minute, "the payment listed as blocked", func() bool {
		ids := blockedIDs(t, fmt.Sprintf(" AND FerryBlockedEventId = %q AND FerryErrorClass = %q", id, effects.ErrClassPaymentUnknown))
		return len(ids) == 1 && ids[0] == wfID
	})
	v, err := tclient.QueryWorkflow(context.Background(), wfID, "", effects.StateQuery)
	require.NoError(t, err)
	var st effects.PaymentState
	require.NoError(t, v.Get(&st))
	require.True(t, st.Escalated)
	require.Equal(t, effects.PhaseEscalated, st.Phase)
	require.Equal(t, effects.StatusUnknown, st.Outcome.Status)
	require.Equal(t, 1, st.Sends)
	require.Positive(t, st.Lookups)
	desc, err := tclient.DescribeWorkflowExecution(context.Background(), wfID, "")
	require.NoError(t, err)
	var memo map[string]any
	require.NoError(t, converterFrom(desc.GetWorkflowExecutionInfo().GetMemo().GetFields()[effects.MemoKey], &memo))
	require.Equal(t, true, memo["escalated"])
	require.Len(t, e.provider.Ledger().Charges, 1, "the charge exists; only Ferry cannot see it")

	e.provider.SetFaults(nil)
	res := result[effects.PaymentResult](t, "charge", id, time.Minute)
	require.Equal(t, effects.StatusSucceeded, res.Outcome.Status)
	require.Equal(t, e.provider.Ledger().Charges[0].ID, res.Outcome.ID)
	require.Equal(t, 1, res.Sends)
	require.Len(t, e.provider.Ledger().Charges, 1)
	waitFor(t, 30*time.Second, "the block to clear in the list", func() bool {
		return len(blockedIDs(t, fmt.Sprintf(" AND FerryBlockedEventId = %q", id))) == 0
	})
}

// Issue test 3: e-mails under 451s and drops after DATA. A confirmed send
// is never repeated, not even when the workflow is reset and runs the send
// again; duplicates at the sink are at most the injected ambiguous drops.
func TestEmailDuplicatesBoundedByAmbiguousDrops(t *testing.T) {
	t.Parallel()
	const n = 60
	e := setupEffects(t, effectsOpts{})
	e.sink.SetFaults(func(a smtpsink.Attempt) smtpsink.Fault {
		switch {
		case a.Seen == 0 && hash(a.MessageID)%2 == 0:
			return smtpsink.FaultDropAfterData
		case a.Seen == 0 && hash(a.MessageID)%3 == 0:
			return smtpsink.FaultTempFail
		case a.Seen == 1 && hash(a.MessageID)%5 == 0:
			return smtpsink.FaultDropAfterData // dropped twice
		}
		return smtpsink.FaultNone
	})
	var ids []string
	for i := range n {
		ids = append(ids, e.order(t, aggID(i), "created", 500))
	}
	for _, id := range ids {
		res := result[effects.EmailResult](t, "email:confirmation", id, 2*time.Minute)
		require.Equal(t, effects.EmailSent, res.Status)
	}
	before := len(e.sink.Messages())
	for _, id := range ids[:5] {
		resetToFirstTask(t, workflows.EffectWorkflowID("email:confirmation", id))
	}
	for _, id := range ids[:5] {
		res := result[effects.EmailResult](t, "email:confirmation", id, time.Minute)
		require.Equal(t, effects.EmailAlreadySent, res.Status, "the ledger stops a send after a confirmed one")
	}
	require.Equal(t, before, len(e.sink.Messages()), "no message after the resets")

	byID := e.sink.ByMessageID()
	require.Len(t, byID, n)
	duplicates := 0
	for _, c := range byID {
		duplicates += c - 1
	}
	drops := e.sink.Injected()[smtpsink.FaultDropAfterData]
	var ambiguous int
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT coalesce(sum(ambiguous), 0) FROM ferry_email_ledger`).Scan(&ambiguous))
	require.LessOrEqual(t, duplicates, drops)
	require.Equal(t, drops, ambiguous, "every drop after DATA is counted ambiguous in the ledger")
	t.Logf("%d e-mails: %d duplicates, %d drops after DATA (ledger: %d ambiguous), %d 451s; 5 resets sent nothing",
		n, duplicates, drops, ambiguous, e.sink.Injected()[smtpsink.FaultTempFail])
}

// Issue test 4: the same event signalled again, its aggregate workflow reset
// to before the publish (it publishes again and asks for the effects
// again), and an operator's replay of it: one run of each effect workflow,
// one charge.
func TestRepeatedEventStartsNoSecondEffect(t *testing.T) {
	t.Parallel()
	// The regular path: its publish activity's result is in history, so a
	// reset to the task after it asks for the effects again. (On the fast
	// path the reset re-runs the local activity, which finds the event
	// delivered and asks for nothing: no effect either way.)
	// Keep-alive: the signal below must reach the run that published the
	// event and started its effects (a one-shot run is over by then).
	e := setupEffects(t, effectsOpts{publishBatch: -1, startMode: poller.StartKeepAlive})
	id := e.order(t, "o-repeat", "created", 1234)
	first := result[effects.PaymentResult](t, "charge", id, time.Minute)
	result[effects.EmailResult](t, "email:confirmation", id, time.Minute)

	ctx := context.Background()
	aggWF := workflows.WorkflowID(e.aggType, "o-repeat")
	ref := workflows.EventRef{ID: id, Version: 1, Type: "created"}
	_, err := tclient.SignalWithStartWorkflow(ctx, aggWF, workflows.EventsSignal, workflows.EventsSignalArg{Events: []workflows.EventRef{ref}},
		clientStartOptions(aggWF, e.taskQueue), workflows.AggregateWorkflowName,
		workflows.AggregateInput{AggregateType: e.aggType, AggregateID: "o-repeat"})
	require.NoError(t, err)

	// Back to just after the publish completed: the publish's recorded
	// result asks for the effects again.
	runID := resetToTaskBefore(t, aggWF, enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
	waitFor(t, time.Minute, "the reset run asked for the effects again", func() bool {
		v, err := tclient.QueryWorkflow(ctx, aggWF, runID, workflows.StateQuery)
		if err != nil {
			return false
		}
		var st workflows.State
		return v.Get(&st) == nil && st.Effects.AlreadyStarted == 2
	})
	v, err := tclient.QueryWorkflow(ctx, aggWF, runID, workflows.StateQuery)
	require.NoError(t, err)
	var st workflows.State
	require.NoError(t, v.Get(&st))
	require.Equal(t, workflows.EffectCounts{AlreadyStarted: 2}, st.Effects)

	replayID := "e2e-" + uuid.NewString()
	run, err := tclient.ExecuteWorkflow(ctx, clientStartOptions(workflows.ReplayWorkflowID(replayID), e.taskQueue), workflows.ReplayWorkflowName,
		workflows.ReplayInput{RequestID: replayID, EventIDs: []string{id}, Reason: "e2e", Actor: "e2e"})
	require.NoError(t, err)
	require.NoError(t, run.Get(ctx, nil))

	require.Equal(t, 1, executions(t, workflows.EffectWorkflowID("charge", id)))
	require.Equal(t, 1, executions(t, workflows.EffectWorkflowID("email:confirmation", id)))
	require.Len(t, e.provider.Ledger().Charges, 1)
	require.Equal(t, first.Outcome.ID, e.provider.Ledger().Charges[0].ID)
	require.Len(t, e.sink.Messages(), 1)
}

// order.cancelled right after order.created refunds the order's charge,
// found by reference, once: the refund waits while the charge is still in
// flight at the provider, and its own unknown outcome (500 after commit) is
// reconciled.
func TestCancelRefundsTheCharge(t *testing.T) {
	t.Parallel()
	e := setupEffects(t, effectsOpts{})
	e.provider.SetFaults(func(r payprovider.Request) payprovider.Fault {
		switch {
		case r.Method == "POST" && r.Path == "/v1/charges" && r.Seen == 0:
			return payprovider.FaultStall // the charge lands 3s later
		case r.Method == "POST" && r.Path == "/v1/refunds" && r.Seen == 0:
			return payprovider.FaultErrorAfterCommit
		}
		return payprovider.FaultNone
	})
	created := e.order(t, "o-cancel", "created", 3100)
	cancelled := e.order(t, "o-cancel", "cancelled", 0)
	charge := result[effects.PaymentResult](t, "charge", created, time.Minute)
	refund := result[effects.PaymentResult](t, "refund", cancelled, time.Minute)
	require.Equal(t, effects.StatusSucceeded, charge.Outcome.Status)
	require.Equal(t, effects.StatusSucceeded, refund.Outcome.Status)
	require.True(t, refund.Reconciled)
	l := e.provider.Ledger()
	require.Len(t, l.Charges, 1)
	require.Len(t, l.Refunds, 1)
	require.Equal(t, charge.Outcome.ID, l.Refunds[0].Charge)
	require.Equal(t, int64(3100), l.Refunds[0].Amount)
	require.Equal(t, refund.Outcome.ID, l.Refunds[0].ID)
}

func clientStartOptions(id, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}
}

func converterFrom(p *commonpb.Payload, v any) error {
	return converter.GetDefaultDataConverter().FromPayload(p, v)
}

// Issue test 1's crash: the worker is SIGKILLed after the provider
// committed the charge and before the activity could complete. The next
// attempt, in a new process, looks the key up before it sends: one POST,
// one charge, and the workflow's result is that charge.
func TestWorkerKilledBetweenChargeAndCompletion(t *testing.T) {
	t.Parallel()
	e := setupEffects(t, effectsOpts{noFerry: true, slowDelay: 20 * time.Second})
	e.provider.SetFaults(func(r payprovider.Request) payprovider.Fault {
		if r.Method == "POST" && r.Seen == 0 {
			return payprovider.FaultSlowAfterCommit // committed; the answer comes too late
		}
		return payprovider.FaultNone
	})
	childEnv := []string{
		"FERRY_EFFECTS=" + e.aggType + ".created=charge",
		"FERRY_PAYMENTS_URL=" + e.provider.URL(),
		"FERRY_PAYMENTS_TIMEOUT=4s",
		"FERRY_PAYMENT_ATTEMPT_TIMEOUT=5s",
	}
	first := e.startProcess(t, "run", childEnv...)
	id := e.order(t, "o-kill", "created", 7700)
	waitFor(t, time.Minute, "the provider to commit the charge", func() bool { return len(e.provider.Ledger().Charges) == 1 })
	first.kill()
	e.startProcess(t, "run", childEnv...)

	res := result[effects.PaymentResult](t, "charge", id, 2*time.Minute)
	l := e.provider.Ledger()
	require.Len(t, l.Charges, 1)
	require.Equal(t, l.Charges[0].ID, res.Outcome.ID)
	require.Equal(t, effects.StatusSucceeded, res.Outcome.Status)
	require.Equal(t, 1, res.Sends)
	require.Equal(t, 1, e.provider.Posts(), "the attempt after the crash looked the key up instead of sending")
}
