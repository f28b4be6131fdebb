package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// eventJSON is the part of `ferry event --json` the test reads.
type eventJSON struct {
	EventID       string            `json:"event_id"`
	Version       int64             `json:"version"`
	Status        string            `json:"status"`
	Attempts      int32             `json:"attempts"`
	NextAttemptAt *time.Time        `json:"next_attempt_at"`
	LastError     string            `json:"last_error"`
	ErrorClass    string            `json:"error_class"`
	Headers       map[string]string `json:"headers"`
	DeliverAfter  *time.Time        `json:"deliver_after"`
	CreatedAt     time.Time         `json:"created_at"`
	DispatchedAt  *time.Time        `json:"dispatched_at"`
	PublishedAt   *time.Time        `json:"published_at"`
	Payload       json.RawMessage   `json:"payload"`
	PayloadSHA256 string            `json:"payload_sha256"`
	Workflow      struct {
		ID              string `json:"id"`
		Status          string `json:"status"`
		RunID           string `json:"run_id"`
		Error           string `json:"error"`
		BlockedAt       string `json:"blocked_at"`
		UIURL           string `json:"ui_url"`
		DescribeCommand string `json:"describe_command"`
	} `json:"workflow"`
	Audit []struct {
		ID           int64  `json:"id"`
		Action       string `json:"action"`
		Actor        string `json:"actor"`
		Reason       string `json:"reason"`
		PayloadAfter string `json:"payload_sha256_after"`
	} `json:"audit"`
	Next []string `json:"next"`
}

// What an operator chasing one event types: `ferry event` by id or by
// aggregate and version shows the row (status, attempts, last error with
// its class, headers, deliver_after, the times), the aggregate's workflow
// with a link into the Temporal UI or the temporal CLI's command, the
// audit rows of its repair, and what to do; sensitive fields are masked
// as in `ferry blocked`; an unknown or malformed id is a clear error.
func TestEventCommandShowsOneEvent(t *testing.T) {
	t.Parallel()
	e := setupPoison(t)
	ctx := context.Background()
	email := "ann.lee." + uuid.NewString()[:8] + "@example.com"
	write := func(eventType string, headers map[string]string, deliverAfter time.Time) string {
		t.Helper()
		id := uuid.Must(uuid.NewV7())
		payload := fmt.Sprintf(`{"customer": {"email": %q}, "sku": "A-1"}`, email)
		require.NoError(t, pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
			_, err := e.writer.Write(ctx, tx, outbox.Event{ID: id, AggregateType: e.aggType, AggregateID: "EV", EventType: eventType,
				Payload: json.RawMessage(payload), Headers: headers, DeliverAfter: deliverAfter})
			return err
		}))
		return id.String()
	}
	poisoned := write("poison", map[string]string{"tenant": "acme", "contact": email}, time.Time{})
	e.waitStatus(t, poisoned, "quarantined")
	wf := workflows.WorkflowID(e.aggType, "EV")
	waitBlocked(t, wf, poisoned)
	delayed := write("changed", nil, time.Now().Add(time.Hour))
	var stored string
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT payload::text FROM outbox_events WHERE id = $1`, poisoned).Scan(&stored))
	sum := sha256.Sum256([]byte(stored))
	digest := hex.EncodeToString(sum[:])

	env := []string{"FERRY_POSTGRES_URL=" + e.db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporalAddr, "FERRY_TEMPORAL_NAMESPACE=" + namespace}
	code, out := ferry(t, env, "event", poisoned)
	require.Equal(t, 0, code, out)
	t.Logf("ferry event %s:\n%s", poisoned, out)
	for _, want := range []string{
		"event " + poisoned + ": " + e.aggType + "/EV v1, poison (schema v1)\n",
		"  status         quarantined, 1 claim(s) by a poller\n",
		"  last error     " + activities.ErrTypeUnroutable + ": quarantined (" + activities.ErrTypeUnroutable + "): ",
		`  headers        contact="` + email + `" tenant="acme"` + "\n",
		fmt.Sprintf("  payload        %d bytes, sha256 %s\n", len(stored), digest),
		"  aggregate      " + e.aggType + "/EV: delivered up to v0, last version v2\n",
		"  workflow       " + wf + ": Running (run ",
		"), blocked at event " + poisoned + "\n",
		"temporal workflow describe --workflow-id '" + wf + "' --address '" + temporalAddr + "'",
		"  audit          no repair or replay of it\n",
		"after fixing the cause: ferry repair " + poisoned + " --action retry --reason '…'",
		"to give it up:         ferry repair " + poisoned + " --action skip --reason '…'",
		"is blocked at it: ferry repair sends the repair there",
	} {
		require.Contains(t, out, want)
	}
	require.Contains(t, out, email, "no sensitive field named: the payload and the header show as they are (the check below can fail)")

	// With the UI's address, a link to the run's page, which the UI serves;
	// with a sensitive field, the address is masked everywhere.
	masked := append(env[:len(env):len(env)], "FERRY_TEMPORAL_UI_URL="+uiURL+"/", "FERRY_SENSITIVE_FIELDS=customer.email")
	code, out = ferry(t, masked, "event", poisoned, "--json")
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, email)
	var v eventJSON
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, poisoned, v.EventID)
	require.Equal(t, "quarantined", v.Status)
	require.Equal(t, int32(1), v.Attempts, "claims, counted at claim time")
	require.Nil(t, v.NextAttemptAt, "no next attempt for a quarantined row")
	require.Equal(t, activities.ErrTypeUnroutable, v.ErrorClass, "the class from its column")
	require.Contains(t, v.LastError, `routing key "`+e.aggType+`.poison"`)
	require.Equal(t, map[string]string{"tenant": "acme", "contact": "[redacted]"}, v.Headers)
	require.JSONEq(t, `{"customer": {"email": "[redacted]"}, "sku": "A-1"}`, string(v.Payload))
	require.Equal(t, digest, v.PayloadSHA256, "the digest of the stored payload, not of the masked one")
	require.NotNil(t, v.DispatchedAt)
	require.Nil(t, v.PublishedAt)
	require.Nil(t, v.DeliverAfter)
	require.Equal(t, poisoned, v.Workflow.BlockedAt)
	require.Equal(t, "Running", v.Workflow.Status)
	require.Empty(t, v.Workflow.DescribeCommand, "a link instead")
	require.Equal(t, fmt.Sprintf("%s/namespaces/%s/workflows/%s/%s/history", uiURL, namespace, url.PathEscape(wf), v.Workflow.RunID), v.Workflow.UIURL)
	resp, err := http.Get(v.Workflow.UIURL)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the UI serves the link")
	var d map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	for _, field := range []string{"status", "attempts", "last_error", "error_class", "headers", "created_at", "dispatched_at", "payload", "workflow", "audit", "next"} {
		require.Contains(t, d, field)
	}

	// By aggregate and version: the delayed v2, waiting for its time.
	code, out = ferry(t, env, "event", "--aggregate", e.aggType+"/EV", "--version", "2", "--json")
	require.Equal(t, 0, code, out)
	v = eventJSON{}
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, delayed, v.EventID)
	require.Equal(t, "pending", v.Status)
	require.NotNil(t, v.DeliverAfter)
	require.WithinDuration(t, time.Now().Add(time.Hour), *v.DeliverAfter, 5*time.Minute)
	require.NotNil(t, v.NextAttemptAt)
	require.Contains(t, strings.Join(v.Next, "\n"), "delayed: not delivered before "+v.DeliverAfter.Format(time.RFC3339))

	// Repaired: published, no error, the audit row of the retry.
	e.br.Bind(t, e.aggType+".poison")
	code, out = ferry(t, env, "repair", poisoned, "--action", "retry", "--reason", "queue bound for "+email, "--actor", "ops")
	require.Equal(t, 0, code, out)
	e.waitStatus(t, poisoned, "published")
	code, out = ferry(t, masked, "event", "--aggregate", e.aggType+"/EV", "--version", "1")
	require.Equal(t, 0, code, out)
	t.Logf("ferry event --aggregate %s/EV --version 1, after the repair, with a sensitive field and the UI's address:\n%s", e.aggType, out)
	for _, want := range []string{
		"event " + poisoned + ": " + e.aggType + "/EV v1, poison (schema v1)\n",
		"  status         published, ",
		"  last error     none\n",
		" retry by ops: \"queue bound for [redacted]\" (payload unchanged; request cli-",
		"to send it again with the same message id: ferry replay --event " + poisoned,
	} {
		require.Contains(t, out, want)
	}
	require.Regexp(t, `  published      \d{4}-\d\d-\d\dT`, out)
	require.NotContains(t, out, email)
	var audit int
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT id FROM ferry_repairs WHERE event_id = $1`, poisoned).Scan(&audit))
	require.Contains(t, out, fmt.Sprintf("  audit          #%d ", audit))

	// Temporal unreachable: the row still shows, and the workflow part says
	// why it is missing.
	down := []string{"FERRY_POSTGRES_URL=" + e.db.URL, "FERRY_TEMPORAL_ADDRESS=" + ferrytest.ClosedAddr(t)}
	code, out = ferry(t, down, "event", poisoned)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "  status         published, ")
	require.Contains(t, out, "  workflow       "+wf+": cannot reach Temporal at ")

	// Wrong ids: one line that says what is wrong.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"event", uuid.NewString()}, "event not in outbox_events: "},
		{[]string{"event", "--aggregate", e.aggType + "/EV", "--version", "9"}, "event not in outbox_events: " + e.aggType + "/EV v9 (delivered events are deleted after --retention, 720h by default)"},
		{[]string{"event", "order-42"}, `event id "order-42" is not a UUID`},
		{[]string{"event", "--aggregate", "EV", "--version", "1"}, `--aggregate "EV" --version 1: want TYPE/ID`},
		{[]string{"event"}, "choose one event: ferry event EVENT_ID, or ferry event --aggregate TYPE/ID --version N"},
	} {
		code, out := ferry(t, env, tc.args...)
		require.Equal(t, 1, code, "%v: %s", tc.args, out)
		require.Contains(t, out, tc.want, tc.args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line: %s", out)
	}
}
