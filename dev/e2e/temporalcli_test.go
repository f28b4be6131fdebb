package e2e

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/workflows"
)

// temporalCLIVersion is the version of Temporal's CLI the documented
// commands are run with; `make temporal-cli` builds it (the Makefile pins
// the same).
const temporalCLIVersion = "v1.5.1"

// temporalCLI finds Temporal's CLI at $FERRY_TEMPORAL_CLI (what `make test`
// sets) or where `make temporal-cli` puts it, and checks its version.
func temporalCLI(t *testing.T) string {
	t.Helper()
	path := os.Getenv("FERRY_TEMPORAL_CLI")
	if path == "" {
		root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		require.NoError(t, err, "find the repository's root")
		path = filepath.Join(strings.TrimSpace(string(root)), "bin", "tools", "temporal-"+temporalCLIVersion, "temporal")
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatalf("Temporal's CLI %s is required for this test and was not found at %s (%v): run `make temporal-cli` or set FERRY_TEMPORAL_CLI", temporalCLIVersion, path, err)
	}
	require.Equal(t, temporalCLIVersion, info.Main.Version, "%s is not Temporal's CLI %s: run `make temporal-cli`", path, temporalCLIVersion)
	return path
}

// docText is the text of the docs pages (repository paths), with shell
// line continuations joined and all white space one space, so a command
// can be looked up as one line.
func docText(t *testing.T, pages ...string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err)
	var all []string
	for _, p := range pages {
		b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), p))
		require.NoError(t, err)
		all = append(all, regexp.MustCompile(`\\\n`).ReplaceAllString(string(b), " "))
	}
	return strings.Join(strings.Fields(strings.Join(all, "\n")), " ")
}

// cliRun is one documented command, run as an operator runs it: by a shell,
// against the test's Temporal server and namespace, with stdin as its
// input. It returns the exit code and the combined output.
func cliRun(t *testing.T, cli, command, stdin string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(cli)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"TEMPORAL_ADDRESS="+temporalAddr, "TEMPORAL_NAMESPACE="+namespace,
		// No profile of the operator's machine.
		"TEMPORAL_CONFIG_FILE="+filepath.Join(t.TempDir(), "none.toml"))
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else {
		require.NoError(t, err, "run %s", command)
	}
	t.Logf("$ %s\n%s", command, out.String())
	return code, out.String()
}

// The repair commands the docs give for Temporal's CLI, run by a shell
// with the real CLI against the embedded server, exactly as written but for
// the workflow ids, event ids and (to stay within this test's aggregates) a
// task queue clause in the queries: list by search attribute, describe,
// query ferry.state, update and signal ferry.repair, a batch signal by
// query; and the effect commands' syntax. Each command is first looked up
// in the docs, so a doc that changes a command changes this test.
func TestTemporalCLIRepairCommands(t *testing.T) {
	t.Parallel()
	forEachLane(t, func(t *testing.T, lane string) {
		cli := temporalCLI(t)
		docs := docText(t, "docs/operating.md", "docs/side-effects.md")
		documented := func(cmd string) string {
			t.Helper()
			require.Contains(t, docs, cmd, "the docs give this command")
			return cmd
		}
		const (
			list     = `temporal workflow list --query "FerryBlocked = true"`
			describe = `temporal workflow describe -w ferry/order/42`
			query    = `temporal workflow query -w ferry/order/42 --name ferry.state`
			update   = `temporal workflow update execute -w ferry/order/42 --name ferry.repair --input '{"request_id":"retry-42","action":"retry","event_id":"<event id>","actor":"ops","reason":"queue bound"}'`
			signal   = `temporal workflow signal -w ferry/order/42 --name ferry.repair --input '{"request_id":"skip-42","action":"skip","event_id":"<event id>","actor":"ops","reason":"obsolete event"}'`
			batch    = `temporal workflow signal --name ferry.repair --query "FerryBlocked = true AND FerryErrorClass = 'Unroutable'" --input '{"request_id":"bind-2026-12-01","action":"retry","expect_error_class":"Unroutable","actor":"ops","reason":"queue bound"}'`

			effectQuery  = `temporal workflow query --workflow-id 'ferry-effect/charge/<event id>' --type ferry.effect.state`
			effectSignal = `temporal workflow signal --workflow-id 'ferry-effect/charge/<event id>' --name ferry.effect.resolve --input '{"action":"succeeded","id":"ch_123","actor":"ana","reason":"charge found in the dashboard"}'`
		)
		on := func(cmd, workflowID, eventID string) string {
			return strings.NewReplacer("ferry/order/42", workflowID, "<event id>", eventID).Replace(documented(cmd))
		}
		e := setupPoison(t, lane)
		inQueue := " AND TaskQueue = '" + e.taskQueue + "'"
		withQueue := func(cmd, clause string) string {
			return strings.Replace(documented(cmd), clause+`"`, clause+inQueue+`"`, 1)
		}

		ids := map[string][2]string{} // aggregate: its poison event, the event after it
		for _, agg := range []string{"A", "B", "C", "D"} {
			ids[agg] = [2]string{e.mustCommit(t, agg, "poison"), e.mustCommit(t, agg, "changed")}
		}
		wf := func(agg string) string { return workflows.WorkflowID(e.aggType, agg) }
		for agg, ev := range ids {
			waitBlocked(t, wf(agg), ev[0])
		}
		waitFor(t, 30*time.Second, "the four blocks in visibility", func() bool { return len(blockedIDs(t, inQueue)) == 4 })

		// The dead-letter view.
		code, out := cliRun(t, cli, withQueue(list, "FerryBlocked = true"), "")
		require.Zero(t, code, out)
		for agg := range ids {
			require.Contains(t, out, wf(agg))
		}
		code, out = cliRun(t, cli, on(describe, wf("A"), ""), "")
		require.Zero(t, code, out)
		require.Contains(t, out, wf("A"))
		require.Contains(t, out, workflows.AggregateWorkflowName)
		require.Contains(t, out, "FerryBlockedEventId", "its search attributes")

		// What is it waiting for?
		st := queryState(t, cli, on(query, wf("A"), ""))
		require.NotNil(t, st.Blocked)
		require.Equal(t, ids["A"][0], st.Blocked.EventID)
		require.Equal(t, "Unroutable", st.Blocked.ErrorClass)
		code, out = cliRun(t, cli, on(query, wf("A"), ""), "")
		require.Zero(t, code, out)
		require.Contains(t, out, ids["A"][0], "the plain answer names the blocked event")

		// Fixed downstream: repair A with the update, B with the signal, C and
		// D with one batch signal.
		e.br.Bind(t, e.aggType+".poison")
		code, out = cliRun(t, cli, on(update, wf("A"), ids["A"][0]), "")
		require.Zero(t, code, out)
		require.Regexp(t, `(?i)result`, out, "the update answers with the result")
		require.Contains(t, out, ids["A"][0])
		require.Contains(t, out, "retry")
		e.waitStatus(t, ids["A"][0], "published")
		e.waitStatus(t, ids["A"][1], "published")

		code, out = cliRun(t, cli, on(signal, wf("B"), ids["B"][0]), "")
		require.Zero(t, code, out)
		e.waitStatus(t, ids["B"][0], "skipped")
		e.waitStatus(t, ids["B"][1], "published")
		st = queryState(t, cli, on(query, wf("B"), ""))
		require.Nil(t, st.Blocked, "B's state after the signal: not blocked")
		require.Equal(t, int64(2), st.Delivered)

		waitFor(t, 30*time.Second, "only C and D blocked in visibility", func() bool { return len(blockedIDs(t, inQueue)) == 2 })
		batchCmd := withQueue(batch, "FerryBlocked = true AND FerryErrorClass = 'Unroutable'")
		code, out = cliRun(t, cli, batchCmd, "") // no answer to the question: nothing is signalled
		require.NotZero(t, code, out)
		require.Len(t, blockedIDs(t, inQueue), 2)
		code, out = cliRun(t, cli, batchCmd, "y\n")
		require.Zero(t, code, out)
		for _, agg := range []string{"C", "D"} {
			e.waitStatus(t, ids[agg][0], "published")
			e.waitStatus(t, ids[agg][1], "published")
		}
		require.Equal(t, 4, e.count(t, `SELECT count(*) FROM ferry_repairs WHERE request_id IN ('retry-42', 'skip-42', $1, $2)`,
			"bind-2026-12-01/"+ids["C"][0], "bind-2026-12-01/"+ids["D"][0]), "each repair audited once")
		waitFor(t, 30*time.Second, "no block left in visibility", func() bool { return len(blockedIDs(t, inQueue)) == 0 })

		// The effect commands parse and reach the server: with no such effect
		// workflow, Temporal says so (a wrong flag would stop the CLI first).
		for _, cmd := range []string{effectQuery, effectSignal} {
			code, out = cliRun(t, cli, on(cmd, "", "no-such-event-"+e.aggType), "")
			require.NotZero(t, code, out)
			require.Contains(t, strings.ToLower(out), "not found", "Temporal's answer, not a usage error: %s", out)
		}
	})
}

// queryState runs a documented ferry.state query with JSON output and
// decodes the workflow's answer.
func queryState(t *testing.T, cli, command string) workflows.State {
	t.Helper()
	code, out := cliRun(t, cli, command+" -o json", "")
	require.Zero(t, code, out)
	i := strings.Index(out, "{")
	require.GreaterOrEqual(t, i, 0, "a JSON answer: %s", out)
	var answer map[string]json.RawMessage
	require.NoError(t, json.NewDecoder(strings.NewReader(out[i:])).Decode(&answer), "the query's JSON answer: %s", out)
	for k, v := range answer {
		if strings.EqualFold(k, "queryResult") {
			// One answer, as an array of the query's results.
			var st []workflows.State
			require.NoError(t, json.Unmarshal(v, &st), "the ferry.state answer: %s", v)
			require.Len(t, st, 1, "the ferry.state answer: %s", v)
			return st[0]
		}
	}
	t.Fatalf("no queryResult in the CLI's answer: %s", out)
	return workflows.State{}
}
