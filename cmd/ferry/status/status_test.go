package status_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/cmd/ferry/status"
	"github.com/ferry-outbox/ferry/workflows"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func snapshot() status.Snapshot {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return status.Snapshot{
		At: at, Namespace: "default", TaskQueue: "ferry",
		Backlog: []status.StatusCount{
			{Status: "delayed", Count: 40, NextDue: 3*time.Minute + 20*time.Second},
			{Status: "dispatched", Count: 12, OldestAge: 3 * time.Second},
			{Status: "pending", Count: 1530, OldestAge: 7*time.Minute + 12*time.Second},
			{Status: "quarantined", Count: 1, OldestAge: 2 * time.Hour},
		},
		PublishedLastMinute: 842,
		PublishedLastHour:   51230,
		Lane: status.Lane{Lane: "publish-first",
			Relays: []status.LaneRelay{
				{Name: "host-a-311/4f2c9a1e", Lane: "publish-first", Source: "poll", Seen: 2 * time.Second},
				{Name: "host-b-97/0b7d33c1", Lane: "publish-first", Source: "wal", Seen: 4 * time.Second},
			},
			WorkflowOwned: 2, RelayLeases: 17,
			Owned: []status.OwnedByRun{
				{WorkflowID: "ferry/order/o-17", Cause: "Unroutable", Epoch: 9021, Since: at.Add(-4 * time.Minute)},
				{WorkflowID: "ferry/order/o-93", Cause: "NeedsWorkflow", Epoch: 9388, Since: at.Add(-3 * time.Second)},
			}},
		Blocked: []status.Blocked{{
			WorkflowID: "ferry/order/42", EventID: "01a22c33-9c08-79d1-8323-db06efa6e315",
			EventType: "paid", ErrorClass: "Unroutable", Since: at.Add(-2 * time.Hour),
		}},
		Unheld: []status.Unheld{{
			EventID: "01a22c35-0000-7000-8000-000000000002", AggregateType: "order", AggregateID: "43", Version: 1,
			EventType: "placed", ErrorClass: "TemporalRefused", LastError: "quarantined (TemporalRefused): …", CreatedAt: at.Add(-10 * time.Minute),
		}},
		EffectsWaiting: []status.EffectWaiting{
			{WorkflowID: "ferry-effect/charge/01a22c33-9c08-79d1-8323-db06efa6e300", WorkflowType: "ferry.effects.Payment",
				Phase: "escalated", ErrorClass: "PaymentUnknown", Since: at.Add(-3 * time.Hour)},
			{WorkflowID: "ferry-effect/charge/01a22c40-0000-7000-8000-000000000001", WorkflowType: "ferry.effects.Payment",
				Phase: "reconciling", Key: "ferry/charge/01a22c40-0000-7000-8000-000000000001/charge", Since: at.Add(-4 * time.Minute)},
		},
		Retention: &status.Run[workflows.RetentionResult]{Last: at.Add(-12 * time.Minute), Next: at.Add(48 * time.Minute),
			Result: &workflows.RetentionResult{Deleted: 1520, PayloadsPurged: 300, Batches: 4}},
		Reconcile: &status.Run[workflows.ReconcileResult]{Last: at.Add(-2 * time.Minute), Next: at.Add(3 * time.Minute),
			Result: &workflows.ReconcileResult{Checked: 1, Redispatched: 3, Aggregates: []string{"ferry/order/7"},
				Drift: &workflows.DriftResult{Sampled: 50, Drifted: []workflows.Drift{{
					WorkflowID: "ferry/order/9", Kind: workflows.DriftWorkflowAhead,
					Differs: "the running workflow has delivered 4, outbox_aggregates.delivered_version says 2",
					Action:  "delivered_version moved back (a restore, a manual update?)…",
				}}}}},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "golden file missing: run go test ./status -update (in cmd/ferry)")
	require.Equal(t, string(want), string(got))
}

func TestRenderGolden(t *testing.T) {
	var buf bytes.Buffer
	status.Render(&buf, snapshot(), false)
	golden(t, "status.golden", buf.Bytes())
}

func TestRenderQuiet(t *testing.T) {
	var buf bytes.Buffer
	status.Render(&buf, status.Snapshot{At: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Namespace: "default", TaskQueue: "ferry"}, false)
	golden(t, "status_quiet.golden", buf.Bytes())
}

func TestRenderColourOnlyWhenAsked(t *testing.T) {
	var plain, colour bytes.Buffer
	status.Render(&plain, snapshot(), false)
	status.Render(&colour, snapshot(), true)
	require.NotContains(t, plain.String(), "\x1b[")
	require.Contains(t, colour.String(), "\x1b[31mferry/order/42")
	require.Contains(t, colour.String(), "\x1b[31mferry-effect/charge/01a22c33", "escalated effects in red")
	require.Contains(t, colour.String(), "\x1b[33mferry-effect/charge/01a22c40", "reconciling ones in yellow")
}

// A cut list says so and names the command that lists all.
func TestRenderSaysTheBlockedListIsCut(t *testing.T) {
	var whole, cut bytes.Buffer
	s := snapshot()
	status.Render(&whole, s, false)
	require.NotContains(t, whole.String(), "lists all")
	s.BlockedTruncated = true
	status.Render(&cut, s, false)
	require.Contains(t, cut.String(), "  (the first 1; `ferry blocked` lists all)\n")
}

// --json carries everything the screen shows, for scripts.
func TestSnapshotJSON(t *testing.T) {
	raw, err := json.MarshalIndent(snapshot(), "", "  ")
	require.NoError(t, err)
	golden(t, "status.json.golden", append(raw, '\n'))
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// An aggregate is shown as it is when a terminal shows it as it is, and
// quoted otherwise.
func TestUnheldAggregate(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"42":          "order/42",
		"o'42 ~%/x":   "order/o'42 ~%/x",
		"müller":      "order/müller",
		"製品-7":        "order/製品-7",
		"nul\x01ctl":  `order/"nul\x01ctl"`,
		"o\u00851":    `order/"o\u00851"`,
		"evil\u202e1": `order/"evil\u202e1"`,
		"m\xc3ller":   `order/"m\xc3ller"`,
	} {
		require.Equal(t, want, status.Unheld{AggregateType: "order", AggregateID: id}.Aggregate(), "%q", id)
	}
}
