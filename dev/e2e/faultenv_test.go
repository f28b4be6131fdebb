package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/dev/devserver"
	"github.com/ferry-outbox/ferry/dev/tcluster"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/workflows"
)

// Faults that need more than a proxy: a Temporal server a test may stop, and
// RabbitMQ's memory alarm (on a node of the test's own).

// ownTemporal is a Temporal server of one test's own, in a process of its
// own (this binary, childEnv=temporal) on a fixed port and a SQLite file, so
// that the test can kill it and start it again as it was. A process, not a
// second server in this one: a server that fails to start can take its
// process down (it ignores Fatal with the dev server's silent logger), and
// a restart must not share state with the first server.
type ownTemporal struct {
	addr, namespace, dbPath string
	// pg: PostgreSQL databases instead of the SQLite file; services and
	// ports: the part of a cluster this process runs (see tcluster_test.go).
	pg       *temporalPG
	services []string
	ports    []int
	// metricsAddr, when set, is where the server serves its own metrics
	// (devserver.Config.MetricsAddress).
	metricsAddr string
	proc        *child
	client      client.Client
}

// Settings of a Temporal server child.
const (
	temporalAddrEnv = "FERRY_E2E_TEMPORAL_ADDRESS"
	temporalDBEnv   = "FERRY_E2E_TEMPORAL_DB"
	// temporalPortsEnv: the 7 internal ports, comma-separated (optional).
	temporalPortsEnv = "FERRY_E2E_TEMPORAL_PORTS"
	// PostgreSQL persistence (devserver.Postgres), optional: the URL, the
	// two database names, the shard count; and the services to run
	// (comma-separated, optional).
	temporalPGEnv       = "FERRY_E2E_TEMPORAL_PG_URL"
	temporalPGDBEnv     = "FERRY_E2E_TEMPORAL_PG_DB"
	temporalPGVisEnv    = "FERRY_E2E_TEMPORAL_PG_VISIBILITY_DB"
	temporalShardsEnv   = "FERRY_E2E_TEMPORAL_SHARDS"
	temporalServicesEnv = "FERRY_E2E_TEMPORAL_SERVICES"
	temporalMetricsEnv  = "FERRY_E2E_TEMPORAL_METRICS_ADDRESS"
	temporalReady       = "temporal: ready"
)

// temporalServerMain is a child process (childEnv=temporal): an embedded
// Temporal server on the given address and SQLite file until SIGTERM.
func temporalServerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var ports []int
	for _, p := range strings.FieldsFunc(os.Getenv(temporalPortsEnv), func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "temporal: %s: %v\n", temporalPortsEnv, err)
			return 1
		}
		ports = append(ports, n)
	}
	cfg := devserver.Config{
		DatabasePath: os.Getenv(temporalDBEnv), Address: os.Getenv(temporalAddrEnv), SearchAttributes: workflows.SearchAttributeTypes,
		InternalPorts: ports, Progress: os.Stdout, MetricsAddress: os.Getenv(temporalMetricsEnv),
		Services: strings.FieldsFunc(os.Getenv(temporalServicesEnv), func(r rune) bool { return r == ',' }),
	}
	if u := os.Getenv(temporalPGEnv); u != "" {
		shards, err := strconv.Atoi(cmp.Or(os.Getenv(temporalShardsEnv), "0"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "temporal: %s: %v\n", temporalShardsEnv, err)
			return 1
		}
		cfg.Postgres = &devserver.Postgres{URL: u, Database: os.Getenv(temporalPGDBEnv),
			VisibilityDatabase: os.Getenv(temporalPGVisEnv), HistoryShards: int32(shards)}
	}
	srv, err := devserver.Start(sctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "temporal: %v\n", err)
		return 1
	}
	fmt.Println(temporalReady)
	<-ctx.Done()
	_ = srv.Stop()
	return 0
}

// startOwnTemporal starts the server; it is stopped at cleanup, after the
// test's processes.
func startOwnTemporal(t *testing.T) *ownTemporal {
	t.Helper()
	return startOwnTemporalWith(t, &ownTemporal{})
}

// startOwnTemporalWith is startOwnTemporal with o's optional settings
// (metricsAddr).
func startOwnTemporalWith(t *testing.T, o *ownTemporal) *ownTemporal {
	t.Helper()
	o.addr, o.namespace, o.dbPath = ferrytest.ClosedAddr(t), "default", filepath.Join(t.TempDir(), "temporal.db")
	o.start(t)
	t.Cleanup(func() { o.kill() })
	c, err := client.Dial(client.Options{HostPort: o.addr, Namespace: o.namespace, Logger: ferrytest.QuietLogger()})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	o.client = c
	return o
}

// start starts the server process and waits until its frontend answers. A
// start can fail when another process took one of the ports it picked in
// the meantime: it is tried three times.
func (o *ownTemporal) start(t *testing.T) {
	t.Helper()
	for try := 1; ; try++ {
		args, env, ready := o.command()
		cmd := exec.Command(os.Args[0], args...)
		out := &ferrytest.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.Env = append(os.Environ(), env...)
		require.NoError(t, cmd.Start())
		c := &child{cmd: cmd, out: out, done: make(chan struct{})}
		go func() { c.err = cmd.Wait(); close(c.done) }()
		deadline := time.After(2 * time.Minute)
		for !strings.Contains(out.String(), ready) && !c.exited() {
			select {
			case <-deadline:
				c.kill()
				t.Fatalf("Temporal server did not start within 2 minutes:\n%s", out.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
		if !c.exited() {
			o.proc = c
			return
		}
		if try == 3 {
			t.Fatalf("Temporal server did not start (%v):\n%s", c.err, out.String())
		}
		t.Logf("Temporal server failed to start (%v), trying again:\n%s", c.err, out.String())
	}
}

// command is how the server process is started: the arguments, the
// environment and the line it prints once it serves. A part of a cluster
// runs as `ferry dev temporal`, the command people run it with.
func (o *ownTemporal) command() (args, env []string, ready string) {
	if len(o.services) == 0 {
		return nil, o.childEnv(), temporalReady
	}
	return o.member().Args(o.pg.layout()), []string{childEnv + "=1", "FERRY_LOG_LEVEL=warn"}, tcluster.Ready
}

// member is the server as a part of a cluster.
func (o *ownTemporal) member() tcluster.Member {
	return tcluster.Member{Address: o.addr, Services: o.services, Ports: o.ports}
}

// childEnv is the environment of the server process.
func (o *ownTemporal) childEnv() []string {
	env := []string{childEnv + "=temporal", temporalAddrEnv + "=" + o.addr, temporalDBEnv + "=" + o.dbPath,
		temporalServicesEnv + "=" + strings.Join(o.services, ","), temporalMetricsEnv + "=" + o.metricsAddr}
	if len(o.ports) > 0 {
		ports := make([]string, len(o.ports))
		for i, p := range o.ports {
			ports[i] = strconv.Itoa(p)
		}
		env = append(env, temporalPortsEnv+"="+strings.Join(ports, ","))
	}
	if o.pg != nil {
		env = append(env, temporalPGEnv+"="+o.pg.url, temporalPGDBEnv+"="+o.pg.db, temporalPGVisEnv+"="+o.pg.vis,
			temporalShardsEnv+"="+strconv.Itoa(o.pg.shards))
	}
	return env
}

// kill SIGKILLs the server: it has no chance to flush or say goodbye.
func (o *ownTemporal) kill() {
	if o.proc != nil {
		o.proc.kill()
		o.proc = nil
	}
}

// env points a ferry process at this server.
func (o *ownTemporal) env() []string {
	return []string{"FERRY_TEMPORAL_ADDRESS=" + o.addr, "FERRY_TEMPORAL_NAMESPACE=" + o.namespace}
}

// memoryAlarm raises the memory alarm of the test's own RabbitMQ node by
// setting its high watermark to 0.0000001 of the machine's memory, and
// waits until the node reports it. The returned func restores the
// watermark the node had.
func memoryAlarm(t *testing.T, mq *servers.RabbitNode) (clear func()) {
	t.Helper()
	cur := strings.TrimSpace(mq.Ctl(t, "eval", "vm_memory_monitor:get_vm_memory_high_watermark()."))
	restore := []string{cur}
	if n, ok := strings.CutPrefix(cur, "{absolute,"); ok {
		restore = []string{"absolute", strings.TrimSuffix(n, "}")}
	} else {
		_, err := strconv.ParseFloat(cur, 64)
		require.NoError(t, err, "memory high watermark %q", cur)
	}
	clear = sync.OnceFunc(func() { mq.Ctl(t, append([]string{"set_vm_memory_high_watermark"}, restore...)...) })
	mq.Ctl(t, "set_vm_memory_high_watermark", "0.0000001")
	waitFor(t, 30*time.Second, "RabbitMQ to report the memory alarm", func() bool {
		return strings.Contains(mq.Ctl(t, "eval", "rabbit_alarm:get_alarms()."), "memory")
	})
	return clear
}
