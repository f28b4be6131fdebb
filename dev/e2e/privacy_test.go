package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/codec"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

// With the payload codec on, events flow as usual, and the history read
// without the codec holds only ciphertext: no aggregate id, no e-mail
// address from the repair's patched payload, no failure message. With a
// sensitive field named, `ferry blocked` masks it in a last error that
// quotes the payload, and `ferry status` shows none of it.
func TestCodecEncryptsHistoryAndOutputIsRedacted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed") // "poison" is unroutable until bound
	ctx := context.Background()

	secret := make([]byte, codec.KeySize)
	_, err := rand.Read(secret)
	require.NoError(t, err)
	keyFlag := "e2e:" + base64.StdEncoding.EncodeToString(secret)
	key, err := codec.ParseKey(keyFlag)
	require.NoError(t, err)
	cdc, err := codec.New([]codec.Key{key})
	require.NoError(t, err)
	opts := client.Options{Namespace: namespace, Logger: ferrytest.QuietLogger()}
	codec.ClientOptions(cdc, &opts)
	cc, err := client.NewClientFromExisting(tclient, opts)
	require.NoError(t, err)
	t.Cleanup(cc.Close)

	// A poller and a worker on the codec's client, as `ferry run
	// --codec-key …` builds them.
	pub, err := broker.New(broker.Config{URL: e.br.URL, Exchange: e.br.Exchange, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	target, err := rabbitmq.New(rabbitmq.Config{Publisher: pub})
	require.NoError(t, err)
	acts, err := activities.New(activities.Config{Pool: e.db.Pool, Broker: target, Temporal: cc})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{Temporal: cc, Activities: acts, TaskQueue: e.taskQueue,
		Workflow: workflows.Settings{Policies: map[string]workflows.EventPolicy{"*": {MaxAttempts: 2}}}})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	p, err := poller.New(poller.Config{Pool: e.db.Pool, Temporal: cc, TaskQueue: e.taskQueue, PollInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(p.Stop)

	aggID := "priv-" + uuid.NewString()
	email := "ann.lee." + uuid.NewString()[:8] + "@example.com"
	write := func(eventType string) string {
		id := uuid.Must(uuid.NewV7())
		payload, _ := json.Marshal(map[string]any{"order": id.String(), "customer": map[string]string{"email": email, "tier": "gold"}})
		require.NoError(t, pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
			_, err := e.writer.Write(ctx, tx, outbox.Event{ID: id, AggregateType: e.aggType, AggregateID: aggID, EventType: eventType, Payload: payload})
			return err
		}))
		return id.String()
	}
	first := write("changed")
	poisoned := write("poison")
	msgs := e.br.Collect(t, 1, time.Minute)
	require.Len(t, msgs, 1, "the first event flows as usual")
	require.Equal(t, first, msgs[0].MessageId)
	require.Contains(t, string(msgs[0].Body), email, "the broker gets the payload as written")

	wf := workflows.WorkflowID(e.aggType, aggID)
	waitFor(t, time.Minute, "the poison event quarantined", func() bool {
		var status string
		_ = e.db.Pool.QueryRow(ctx, `SELECT status FROM outbox_events WHERE id = $1`, poisoned).Scan(&status)
		return status == "quarantined"
	})
	waitFor(t, 30*time.Second, "the block in visibility", func() bool {
		return len(blockedIDs(t, " AND WorkflowId = '"+wf+"'")) == 1
	})
	// Ferry's own publish errors never quote a payload; a last error that
	// does (a custom activity's, a provider's answer) is what the mask is
	// for, so this one is made to.
	_, err = e.db.Pool.Exec(ctx, `UPDATE outbox_events SET last_error = last_error || '; rejected ' || (payload->'customer'->>'email') WHERE id = $1`, poisoned)
	require.NoError(t, err)

	env := []string{"FERRY_POSTGRES_URL=" + e.db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporalAddr, "FERRY_TEMPORAL_NAMESPACE=" + namespace,
		"FERRY_TASK_QUEUE=" + e.taskQueue, "FERRY_CODEC_KEY=" + keyFlag}
	blockedLine := e.aggType + "/" + aggID + "  v2  event " + poisoned + " (poison)"

	// Without a sensitive field the address shows: the check below can fail.
	code, out := ferry(t, env, "blocked")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, blockedLine)
	require.Contains(t, out, "rejected "+email)

	masked := append(env[:len(env):len(env)], "FERRY_SENSITIVE_FIELDS=customer.email")
	code, out = ferry(t, masked, "blocked")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, blockedLine, "the operator still sees what is blocked")
	require.Contains(t, out, "rejected [redacted]")
	require.Contains(t, out, activities.ErrTypeUnroutable)
	require.Contains(t, out, "ferry repair "+poisoned+" --action retry --reason")
	require.NotContains(t, out, email)
	code, out = ferry(t, masked, "blocked", "--json")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "rejected [redacted]")
	require.NotContains(t, out, email)
	code, out = ferry(t, masked, "status")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, wf)
	require.Contains(t, out, "ferry repair "+poisoned+" --action retry")
	require.NotContains(t, out, email)

	// The repair's patched payload is the one payload Ferry sends through
	// Temporal; the CLI encrypts it with the same key.
	e.br.Bind(t, e.aggType+".poison")
	patch := filepath.Join(t.TempDir(), "patch.json")
	require.NoError(t, os.WriteFile(patch, []byte(`{"customer":{"email":"`+email+`","tier":"silver"}}`), 0o600))
	code, out = ferry(t, masked, "repair", poisoned, "--action", "patch", "--payload-file", patch, "--reason", "tier fixed", "--actor", "ops")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "patch of event "+poisoned)
	msgs = e.br.Collect(t, 1, time.Minute)
	require.Len(t, msgs, 1)
	require.Equal(t, poisoned, msgs[0].MessageId)
	require.Contains(t, string(msgs[0].Body), `"silver"`)

	// The codec's client reads the workflow's state; one without the codec
	// cannot.
	v, err := cc.QueryWorkflow(ctx, wf, "", workflows.StateQuery)
	require.NoError(t, err)
	var st workflows.State
	require.NoError(t, v.Get(&st))
	require.Equal(t, int64(2), st.Delivered)
	if v, err := tclient.QueryWorkflow(ctx, wf, "", workflows.StateQuery); err == nil {
		require.Error(t, v.Get(&st), "the default converter cannot read an encrypted answer")
	}

	// The raw history, read without the codec.
	var encrypted, failures int
	var sawUpdate bool
	it := tclient.GetWorkflowHistory(ctx, wf, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		raw, err := proto.Marshal(ev)
		require.NoError(t, err)
		require.NotContains(t, string(raw), email, "event %d (%s)", ev.EventId, ev.EventType)
		forEachPayload(ev.ProtoReflect(), false, func(p *commonpb.Payload, clear bool) {
			require.NotContains(t, string(p.Data), aggID, "event %d (%s): a payload names the aggregate", ev.EventId, ev.EventType)
			if clear {
				return // search attributes and headers: indexed or read by Temporal itself
			}
			require.Equal(t, codec.Encoding, string(p.Metadata[converter.MetadataEncoding]), "event %d (%s)", ev.EventId, ev.EventType)
			require.Equal(t, key.ID, string(p.Metadata[codec.MetadataKeyID]))
			encrypted++
		})
		if a := ev.GetWorkflowTaskFailedEventAttributes(); a.GetCause() == enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND {
			// The server's own failure when a signal arrives while a
			// one-shot run's task completes it (the run then takes the
			// signal): its message is the cause's name, no data of ours.
			require.Equal(t, "UnhandledCommand", a.GetFailure().GetMessage())
			continue
		}
		forEachFailure(ev, func(msg string) {
			require.Equal(t, "Encoded failure", msg, "event %d (%s): a failure message in clear", ev.EventId, ev.EventType)
			failures++
		})
		if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil {
			sawUpdate = true
			args := a.GetAcceptedRequest().GetInput().GetArgs().GetPayloads()
			require.NotEmpty(t, args)
			require.Equal(t, codec.Encoding, string(args[0].Metadata[converter.MetadataEncoding]), "the patch is encrypted")
		}
	}
	require.True(t, sawUpdate, "the repair went through the history as an update")
	require.Positive(t, failures, "the unroutable publish failed in the history")
	t.Logf("%d encrypted payloads and %d encoded failures in %s's history", encrypted, failures, wf)
	require.Greater(t, encrypted, 5)
}

// forEachPayload calls f for every payload under m; clear is true inside
// search attributes and headers, which no codec encrypts.
func forEachPayload(m protoreflect.Message, clear bool, f func(p *commonpb.Payload, clear bool)) {
	if p, ok := m.Interface().(*commonpb.Payload); ok {
		f(p, clear)
		return
	}
	switch m.Descriptor().FullName() {
	case "temporal.api.common.v1.SearchAttributes", "temporal.api.common.v1.Header":
		clear = true
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					forEachPayload(mv.Message(), clear, f)
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := range v.List().Len() {
					forEachPayload(v.List().Get(i).Message(), clear, f)
				}
			}
		case fd.Message() != nil:
			forEachPayload(v.Message(), clear, f)
		}
		return true
	})
}

// forEachFailure calls f with the message of every failure in ev,
// causes included.
func forEachFailure(ev *historypb.HistoryEvent, f func(msg string)) {
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		if fl, ok := m.Interface().(interface{ GetMessage() string }); ok && strings.HasSuffix(string(m.Descriptor().FullName()), ".Failure") {
			f(fl.GetMessage())
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Message() != nil && !fd.IsList() && !fd.IsMap() {
				walk(v.Message())
			}
			return true
		})
	}
	walk(ev.ProtoReflect())
}
