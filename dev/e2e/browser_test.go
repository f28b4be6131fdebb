package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"golang.org/x/net/websocket"

	"github.com/ferry-outbox/ferry/activities"
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
// by Ferry's search attributes: the dead-letter view an operator opens,
// filtered by the error class and the event.
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

	require.Empty(t, blockedIDs(t, fmt.Sprintf(" AND FerryErrorClass = '%s' AND WorkflowId = '%s'", activities.ErrTypeTooLarge, wf)),
		"another class does not match: the filter below can fail")

	page := fmt.Sprintf("%s/namespaces/%s/workflows?query=%s", uiURL, namespace,
		url.QueryEscape(fmt.Sprintf("FerryBlocked = true AND FerryErrorClass = '%s' AND FerryBlockedEventId = '%s'", activities.ErrTypeUnroutable, id)))
	dom := headless(t, bin, page, "--dump-dom")
	require.Contains(t, dom, wf, "the UI's list filtered by FerryBlocked and FerryErrorClass shows the blocked workflow")

	shot := filepath.Join(t.ArtifactDir(), "blocked-workflows.png")
	headless(t, bin, page, "--screenshot="+shot)
	info, err := os.Stat(shot)
	require.NoError(t, err)
	require.Greater(t, info.Size(), int64(10_000), "a real screenshot, not a blank page")
	t.Logf("screenshot of the dead-letter view: %s", shot)
}

// uiPage opens pageURL in headless Chromium and reads the page's text (what
// a person reads: document.body.innerText) until it contains every one of
// want, then saves a screenshot as the artifact shot and returns the text.
// A workflow's page keeps long polls open, so --dump-dom, which waits for
// the network to go quiet, never returns there; this drives Chromium over
// its DevTools protocol instead.
func uiPage(t *testing.T, bin, pageURL, shot string, want ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--window-size=1400,900",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--remote-allow-origins=*", "about:blank")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	listening := regexp.MustCompile(`DevTools listening on ws://([^/\s]+)/`)
	sc := bufio.NewScanner(stderr)
	var devtools string
	for devtools == "" && sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			devtools = m[1]
		}
	}
	require.NotEmpty(t, devtools, "Chromium did not say where its DevTools listen")
	go func() {
		for sc.Scan() {
		}
	}()

	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+devtools+"/json/new?"+url.QueryEscape(pageURL), nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var target struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	err = json.NewDecoder(resp.Body).Decode(&target)
	_ = resp.Body.Close()
	require.NoError(t, err)
	ws, err := websocket.Dial(target.WebSocketDebuggerURL, "", "http://127.0.0.1/")
	require.NoError(t, err)
	defer ws.Close()
	id := 0
	call := func(method string, params map[string]any, result any) {
		t.Helper()
		id++
		require.NoError(t, ws.SetDeadline(time.Now().Add(30*time.Second)))
		require.NoError(t, websocket.JSON.Send(ws, map[string]any{"id": id, "method": method, "params": params}))
		for {
			var msg struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			require.NoError(t, websocket.JSON.Receive(ws, &msg), "DevTools %s", method)
			if msg.ID != id {
				continue // an event
			}
			require.Nil(t, msg.Error, "DevTools %s: %s", method, msg.Error)
			require.NoError(t, json.Unmarshal(msg.Result, result))
			return
		}
	}

	var text string
	missing := want
	for deadline := time.Now().Add(60 * time.Second); len(missing) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the page %s never showed %q; it read:\n%s", pageURL, missing, text)
		}
		time.Sleep(500 * time.Millisecond)
		var r struct {
			Result struct {
				Value string `json:"value"`
			} `json:"result"`
		}
		call("Runtime.evaluate", map[string]any{"expression": "document.body ? document.body.innerText : ''", "returnByValue": true}, &r)
		text = r.Result.Value
		missing = nil
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = append(missing, w)
			}
		}
	}
	var png struct {
		Data string `json:"data"`
	}
	call("Page.captureScreenshot", map[string]any{"format": "png"}, &png)
	b, err := base64.StdEncoding.DecodeString(png.Data)
	require.NoError(t, err)
	require.Greater(t, len(b), 10_000, "a real screenshot, not a blank page")
	path := filepath.Join(t.ArtifactDir(), shot)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	t.Logf("screenshot of %s: %s", pageURL, path)
	return text
}

// workflowPage is the Temporal UI's page (tab) of one workflow run.
func workflowPage(workflowID, runID, tab string) string {
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s/%s/%s", uiURL, namespace, url.PathEscape(workflowID), runID, tab)
}

// What an operator sees in the Temporal UI of an aggregate whose publish
// keeps failing: the pending publish activity with its attempt count (of
// the policy's attempts) and its last failure, the broker's NO_ROUTE; and of
// a quarantined one: running, blocked at the event, with its error class.
// Screenshots of the pages are artifacts.
func TestUIShowsRetriesAndQuarantine(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	ctx := context.Background()
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	const stuckAttempts = 50 // retried for minutes: the test looks while it is
	e.startFerry(t, ferryOpts{policies: map[string]workflows.EventPolicy{
		"*":     {MaxAttempts: 2},
		"stuck": {MaxAttempts: stuckAttempts},
	}})

	retrying, err := e.commitType(ctx, "RETRYING", "stuck", false)
	require.NoError(t, err)
	quarantined, err := e.commitType(ctx, "QUARANTINED", "poison", false)
	require.NoError(t, err)
	wfR, wfQ := workflows.WorkflowID(e.aggType, "RETRYING"), workflows.WorkflowID(e.aggType, "QUARANTINED")

	// Temporal's own account first, to hold the UI to it.
	var runR string
	var attempt int32
	waitFor(t, time.Minute, "the publish of "+retrying+" waiting for its third attempt", func() bool {
		d, err := tclient.DescribeWorkflowExecution(ctx, wfR, "")
		if err != nil || len(d.GetPendingActivities()) == 0 {
			return false
		}
		pa := d.GetPendingActivities()[0]
		runR, attempt = d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), pa.GetAttempt()
		return pa.GetActivityType().GetName() == workflows.PublishEventActivity && attempt >= 3 &&
			pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_SCHEDULED && pa.GetLastFailure() != nil
	})

	text := uiPage(t, bin, workflowPage(wfR, runR, "pending-activities"), "retrying-pending-activities.png",
		workflows.PublishEventActivity, "Attempt", "Last Failure", "NO_ROUTE")
	d, err := tclient.DescribeWorkflowExecution(ctx, wfR, runR)
	require.NoError(t, err)
	m := regexp.MustCompile(`Attempt\s+(\d+)\s*/\s*(\d+)`).FindStringSubmatch(text)
	require.NotNil(t, m, "the attempt count on the page:\n%s", text)
	shown, _ := strconv.Atoi(m[1])
	require.GreaterOrEqual(t, shown, int(attempt), "the attempt Temporal reported before the page loaded")
	require.LessOrEqual(t, shown, int(d.GetPendingActivities()[0].GetAttempt()), "and no later than the one it reports now")
	require.Equal(t, strconv.Itoa(stuckAttempts), m[2], "out of the policy's attempts")
	require.Contains(t, text, e.aggType+".stuck", "the last failure names the unroutable routing key")

	waitBlocked(t, wfQ, quarantined)
	d, err = tclient.DescribeWorkflowExecution(ctx, wfQ, "")
	require.NoError(t, err)
	require.Empty(t, d.GetPendingActivities(), "quarantined: nothing is retried any more")
	runQ := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	uiPage(t, bin, workflowPage(wfQ, runQ, "search-attributes"), "quarantined-search-attributes.png",
		"RUNNING", `"FerryBlocked": true`, `"FerryBlockedEventId": "`+quarantined+`"`, `"FerryBlockedEventType": "poison"`, `"FerryErrorClass": "Unroutable"`)
	uiPage(t, bin, workflowPage(wfQ, runQ, "pending-activities"), "quarantined-pending-activities.png",
		"RUNNING", "No Pending Activities")
}
