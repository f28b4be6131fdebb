package status_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/internal/status"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func snapshot() status.Snapshot {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return status.Snapshot{
		At: at, Namespace: "default", TaskQueue: "ferry",
		Backlog: []status.StatusCount{
			{Status: "dispatched", Count: 12, OldestAge: 3 * time.Second},
			{Status: "pending", Count: 1530, OldestAge: 7*time.Minute + 12*time.Second},
			{Status: "quarantined", Count: 1, OldestAge: 2 * time.Hour},
		},
		PublishedLastMinute: 842,
		PublishedLastHour:   51230,
		Blocked: []status.Blocked{{
			WorkflowID: "ferry/order/42", EventID: "01a22c33-9c08-79d1-8323-db06efa6e315",
			EventType: "paid", ErrorClass: "Unroutable", Since: at.Add(-2 * time.Hour),
		}},
		Retention: &status.Run{Last: at.Add(-12 * time.Minute), Next: at.Add(48 * time.Minute)},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "golden file missing: run go test ./internal/status -update")
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
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
