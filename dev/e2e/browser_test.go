package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/workflows"
)

// chromium finds headless Chromium (`make browser` installs Debian's).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("FERRY_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("headless Chromium is required for the UI test and was not found: run `make browser` (apt-get install chromium) or set FERRY_CHROMIUM")
	return ""
}

// headless runs Chromium on url with args and returns its standard output.
func headless(t *testing.T, bin, pageURL string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1400,900", "--virtual-time-budget=15000"}
	cmd := exec.CommandContext(ctx, bin, append(append(base, args...), pageURL)...)
	out, err := cmd.Output()
	require.NoError(t, err, "chromium %v", args)
	return string(out)
}

// The Temporal UI served by the embedded server finds a blocked aggregate
// by Ferry's search attribute: the dead-letter view an operator opens.
func TestUIFindsBlockedWorkflow(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	e := setupPoison(t)
	id := e.mustCommit(t, "UI", "poison")
	e.waitStatus(t, id, "quarantined")
	wf := workflows.WorkflowID(e.aggType, "UI")
	waitFor(t, 30*time.Second, "the block in visibility", func() bool {
		return len(blockedIDs(t, fmt.Sprintf(" AND WorkflowId = '%s'", wf))) == 1
	})

	page := fmt.Sprintf("%s/namespaces/%s/workflows?query=%s", uiURL, namespace,
		url.QueryEscape(fmt.Sprintf("FerryBlocked = true AND FerryBlockedEventId = '%s'", id)))
	dom := headless(t, bin, page, "--dump-dom")
	require.Contains(t, dom, wf, "the UI's list filtered by FerryBlocked shows the blocked workflow")

	shot := filepath.Join(t.ArtifactDir(), "blocked-workflows.png")
	headless(t, bin, page, "--screenshot="+shot)
	info, err := os.Stat(shot)
	require.NoError(t, err)
	require.Greater(t, info.Size(), int64(10_000), "a real screenshot, not a blank page")
	t.Logf("screenshot of the dead-letter view: %s", shot)
}
