package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/workflows"
)

// `make run`, the first command a newcomer types: `ferry-dev dev` with the
// demo (this test binary is ferry-dev when childEnv is 1: devcli.Main, as
// dev/cmd/ferry-dev runs it). It runs on free ports, a private RabbitMQ node
// and a schema of its own, so that it can run beside a developer's `make
// run`, with a demo order every 200 ms instead of every second. It checks
// what the README says the newcomer sees: where the UI is, a line for each
// demo transaction, for each event the example consumer applies and for
// each repeat it drops; the effect workflows of the demo orders complete
// against the stand-ins; the UI answers; `ferry status` and `ferry event`
// work against it; SIGINT stops everything with exit 0 and no process left
// behind. Then it starts it again at once on the
// same data and ports, as after a Ctrl-C and `make run` again, and logs how
// soon the first demo event is applied (docs/fault-tolerance.md's figure).
func TestMakeRun(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	mq := servers.StartRabbitNode(t, "")
	temporal, ui, dataDir := ferrytest.ClosedAddr(t), ferrytest.ClosedAddr(t), t.TempDir()
	env := []string{childEnv + "=1", "FERRY_POSTGRES_URL=" + db.URL, "FERRY_AMQP_URL=" + mq.URL, "FERRY_TEMPORAL_ADDRESS=" + temporal,
		"FERRY_DEV_UI_ADDRESS=" + ui, "FERRY_DEV_DATA_DIR=" + dataDir, "FERRY_DEV_DEMO_EVERY=200ms"}

	dev := startDev(t, env)
	dev.waitFor(t, 3*time.Minute, "the UI's address", "  Temporal UI:  http://"+ui+"/namespaces/default/workflows\n")
	dev.waitFor(t, time.Minute, "a demo event applied", "← applied     order ")
	t.Logf("first start: first demo event applied %s after start (a new SQLite store)", dev.firstSeen("← applied     order ").Round(100*time.Millisecond))

	// Every fifth applied message is sent again and dropped as a repeat:
	// the line of the re-send, then the duplicate's, for the same event.
	resent := regexp.MustCompile(`\(demo\) sent event (…[0-9a-f-]{12}) again, as the broker would after a crash between commit and ack\n`)
	var dup string
	waitFor(t, 2*time.Minute, "a repeat dropped", func() bool {
		for _, m := range resent.FindAllStringSubmatch(dev.out.String(), -1) {
			if strings.Contains(dev.out.String(), "event "+m[1]+" was already applied: acked, no effect\n") {
				dup = m[1]
				return true
			}
		}
		return false
	})
	out := dev.out.String()
	require.Regexp(t, `← duplicate   order …[0-9a-f-]{12}  (created|paid) +v\d+  event `+regexp.QuoteMeta(dup)+` was already applied`, out)
	require.Regexp(t, `→ committed  order …[0-9a-f-]{12}  created  v1  event …[0-9a-f-]{12}\n`, out, "the producer's lines")
	require.Regexp(t, `← applied     order …[0-9a-f-]{12}  created  v1  reserved \d+ unit\(s\) for customer-\d+\n`, out)
	applied := strings.Count(out[:strings.Index(out, "sent event "+dup)], "← applied ")
	require.GreaterOrEqual(t, applied, 5, "a repeat after every fifth applied message, not before")

	// Each demo order is a workflow ferry/order/<id>; its order.created
	// event starts a payment and an e-mail workflow, which complete against
	// the sandboxes (a fifth of whose first requests meet a fault).
	tc, err := client.Dial(client.Options{HostPort: temporal, Namespace: "default", Logger: ferrytest.QuietLogger()})
	require.NoError(t, err)
	defer tc.Close()
	ctx := context.Background()
	waitFor(t, time.Minute, "five demo orders", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE event_type = 'created'`).Scan(&n))
		return n >= 5
	})
	rows, err := db.Pool.Query(ctx, `SELECT aggregate_id, id::text FROM outbox_events WHERE event_type = 'created' ORDER BY created_at LIMIT 5`)
	require.NoError(t, err)
	var orders, created []string
	for rows.Next() {
		var o, e string
		require.NoError(t, rows.Scan(&o, &e))
		orders, created = append(orders, o), append(created, e)
	}
	require.NoError(t, rows.Err())
	require.Len(t, created, 5)
	for i, eventID := range created {
		_, err := tc.DescribeWorkflowExecution(ctx, workflows.WorkflowID("order", orders[i]), "")
		require.NoError(t, err, "the order's aggregate workflow")
		for _, effect := range []string{"charge", "email:confirmation"} {
			wfID := workflows.EffectWorkflowID(effect, eventID)
			waitFor(t, 2*time.Minute, wfID+" to complete", func() bool {
				d, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
				if err != nil {
					return false
				}
				st := d.GetWorkflowExecutionInfo().GetStatus()
				require.Contains(t, []enumspb.WorkflowExecutionStatus{enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}, st,
					"%s ended %s", wfID, st)
				return st == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
			})
		}
	}

	// The UI answers on its address: its page, and its API lists the
	// demo's order workflows through the embedded server.
	for _, path := range []string{"/namespaces/default/workflows", "/api/v1/namespaces/default/workflows?query=" + url.QueryEscape("WorkflowType = '"+workflows.AggregateWorkflowName+"'")} {
		resp, err := http.Get("http://" + ui + path)
		require.NoError(t, err, path)
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		if strings.HasPrefix(path, "/api/") {
			require.Contains(t, string(body), "ferry/order/"+orders[0], path)
		} else {
			require.Contains(t, string(body), "<html", path)
		}
	}

	// `ferry status` against it.
	code, status := ferry(t, []string{"FERRY_POSTGRES_URL=" + db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporal}, "status")
	require.Equal(t, 0, code, status)
	require.Contains(t, status, "Ferry status  namespace default, task queue ferry")
	require.Contains(t, status, "at "+temporal+" (cluster active): persistence SQLite (sqlite)")
	m := regexp.MustCompile(`published (\d+) in the last minute`).FindStringSubmatch(status)
	require.NotNil(t, m, status)
	n, _ := strconv.Atoi(m[1])
	require.Positive(t, n, status)
	require.Contains(t, status, "Blocked aggregates\n  none\n")
	require.Contains(t, status, "retention: ")

	// `ferry event` on a demo order, as the README shows it.
	code, event := ferry(t, []string{"FERRY_POSTGRES_URL=" + db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporal, "FERRY_TEMPORAL_UI_URL=http://" + ui},
		"event", "--aggregate", "order/"+orders[0], "--version", "1")
	require.Equal(t, 0, code, event)
	require.Contains(t, event, "event "+created[0]+": order/"+orders[0]+" v1, created (schema v1)\n")
	require.Contains(t, event, "  status         published, ")
	require.Contains(t, event, "http://"+ui+"/namespaces/default/workflows/"+url.PathEscape(workflows.WorkflowID("order", orders[0]))+"/")

	// Ctrl-C: everything stops, exit 0, nothing left running or listening.
	dev.interrupt(t)
	out = dev.out.String()
	require.Contains(t, out, "ferry: stopped\n")
	require.Contains(t, out, "ferry dev: stopping embedded Temporal server…\n")
	require.Regexp(t, `inventory: stopped after \d+ applied, [1-9]\d* duplicates, 0 stale, 0 parked, 0 quarantined\n`, out)
	for _, addr := range []string{temporal, ui} {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		require.Error(t, err, "%s still listens after the exit", addr)
	}

	// `make run` again at once: the same data and ports.
	again := startDev(t, env)
	again.waitFor(t, 2*time.Minute, "a demo event applied after the restart", "← applied     order ")
	took := again.firstSeen("← applied     order ")
	t.Logf("restarted at once: first demo event applied %s after start", took.Round(100*time.Millisecond))
	again.interrupt(t)
}

// devProcess is `ferry-dev dev` in a process group of its own.
type devProcess struct {
	cmd     *exec.Cmd
	out     *ferrytest.Buffer
	started time.Time
	done    chan struct{}
	err     error
	// seen: when each waited-for line first showed (polled every 50 ms).
	seen map[string]time.Duration
	// descendants: the processes it started, as last seen while it ran.
	descendants []procID
}

func startDev(t *testing.T, env []string) *devProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "dev")
	out := &ferrytest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	d := &devProcess{cmd: cmd, out: out, started: time.Now(), done: make(chan struct{}), seen: map[string]time.Duration{}}
	go func() { d.err = cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
		if t.Failed() {
			t.Logf("output of ferry-dev dev (pid %d):\n%s", cmd.Process.Pid, out.String())
		}
	})
	return d
}

// waitFor waits until the output holds line, and notes when it first did.
func (d *devProcess) waitFor(t *testing.T, timeout time.Duration, what, line string) {
	t.Helper()
	waitFor(t, timeout, what, func() bool {
		select {
		case <-d.done:
			t.Fatalf("ferry-dev dev exited (%v) while waiting for %s:\n%s", d.err, what, d.out.String())
		default:
		}
		if strings.Contains(d.out.String(), line) {
			d.seen[line] = time.Since(d.started)
			return true
		}
		d.descendants = descendantsOf(d.cmd.Process.Pid)
		return false
	})
}

func (d *devProcess) firstSeen(line string) time.Duration { return d.seen[line] }

// interrupt sends SIGINT, as Ctrl-C does, and checks that the process exits
// 0 within a minute and leaves none of its process group or the processes
// it started behind.
func (d *devProcess) interrupt(t *testing.T) {
	t.Helper()
	d.descendants = append(d.descendants, descendantsOf(d.cmd.Process.Pid)...)
	require.NoError(t, d.cmd.Process.Signal(os.Interrupt))
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		t.Fatalf("ferry-dev dev still runs a minute after SIGINT:\n%s", d.out.String())
	}
	require.NoError(t, d.err, "exit 0 after SIGINT:\n%s", d.out.String())
	require.Equal(t, 0, d.cmd.ProcessState.ExitCode())
	waitFor(t, 10*time.Second, "no process of its group left", func() bool { return len(groupMembers(d.cmd.Process.Pid)) == 0 })
	for _, p := range d.descendants {
		require.False(t, p.alive(), "process %d (%s), started by ferry-dev dev, outlived it", p.pid, p.comm)
	}
	t.Logf("ferry-dev dev (pid %d) exited 0 on SIGINT; processes it had started: %d, all gone", d.cmd.Process.Pid, len(d.descendants))
}

// procID names a process across pid reuse: its pid and start time.
type procID struct {
	pid       int
	comm      string
	startTime string
}

// procStat reads /proc/<pid>/stat: the command, the parent, the process
// group and the start time; ok false when the process is gone.
func procStat(pid int) (comm string, ppid, pgrp int, start string, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, 0, "", false
	}
	s := string(b)
	open, shut := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || shut < open {
		return "", 0, 0, "", false
	}
	// After the command: state, ppid, pgrp, … starttime is field 22.
	f := strings.Fields(s[shut+1:])
	if len(f) < 20 {
		return "", 0, 0, "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	pgrp, _ = strconv.Atoi(f[2])
	return s[open+1 : shut], ppid, pgrp, f[19], true
}

// processes lists the pids of /proc.
func processes() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// descendantsOf lists the processes below pid (children, theirs, …).
func descendantsOf(pid int) []procID {
	children := map[int][]procID{}
	for _, p := range processes() {
		comm, ppid, _, start, ok := procStat(p)
		if ok {
			children[ppid] = append(children[ppid], procID{pid: p, comm: comm, startTime: start})
		}
	}
	var out []procID
	queue := []int{pid}
	for len(queue) > 0 {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
		queue = queue[1:]
	}
	return out
}

// groupMembers lists the live processes of process group pgid (zombies
// included: a zombie is still a process nobody reaped).
func groupMembers(pgid int) []int {
	var out []int
	for _, p := range processes() {
		if _, _, pgrp, _, ok := procStat(p); ok && pgrp == pgid {
			out = append(out, p)
		}
	}
	return out
}

// alive says whether the process still runs (the same pid and start time).
func (p procID) alive() bool {
	_, _, _, start, ok := procStat(p.pid)
	return ok && start == p.startTime
}
