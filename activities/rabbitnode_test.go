package activities_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/internal/testenv"
)

// rabbitNode is a RabbitMQ node of the test's own, for broker settings the
// shared one must keep (design-notes.md, "A private RabbitMQ node"): its
// own name, ports, data folder and Erlang cookie, stopped and removed at
// cleanup. Starting one takes several seconds: share it between subtests.
type rabbitNode struct {
	URL  string
	name string
	dir  string
	env  []string
	cred *syscall.Credential // as the rabbitmq user when the test runs as root
	pgid int                 // the server's process group (Setpgid)
	done chan error          // the server's exit
}

// startRabbitNode starts a node whose rabbitmq.conf adds conf to the
// listener settings. It fails the test, never skips, without RabbitMQ.
func startRabbitNode(t *testing.T, conf string) *rabbitNode {
	t.Helper()
	server, ctl := rabbitBinary(t, "rabbitmq-server"), rabbitBinary(t, "rabbitmqctl")
	dir, err := os.MkdirTemp("", "ferry-rabbit-")
	require.NoError(t, err)
	n := &rabbitNode{name: testenv.Name("ferrytest") + "@localhost", dir: dir}
	t.Cleanup(func() { n.stop(t, ctl) })

	port, distPort := freePort(t), freePort(t)
	n.URL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port)
	files := map[string]string{
		"rabbitmq.conf":   fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n%s\n", port, conf),
		"enabled_plugins": "[].\n",
	}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	n.env = append(os.Environ(),
		"HOME="+dir, // the node's own Erlang cookie, shared with rabbitmqctl
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"),
		"RABBITMQ_FEATURE_FLAGS_FILE="+filepath.Join(dir, "feature_flags"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
	)
	if os.Geteuid() == 0 {
		// RabbitMQ refuses to run as root; its files must be its user's.
		n.cred = rabbitUser(t)
		require.NoError(t, os.Chmod(dir, 0o755))
		require.NoError(t, filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Chown(path, int(n.cred.Uid), int(n.cred.Gid))
		}))
	}

	out, err := os.Create(filepath.Join(dir, "server.out"))
	require.NoError(t, err)
	defer out.Close()
	cmd := exec.Command(server)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, n.env, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: n.cred}
	require.NoError(t, cmd.Start(), "start %s", server)
	n.pgid = cmd.Process.Pid
	n.done = make(chan error, 1)
	go func() { n.done <- cmd.Wait() }()

	deadline := time.Now().Add(90 * time.Second)
	for {
		conn, err := amqp.Dial(n.URL)
		if err == nil {
			require.NoError(t, conn.Close())
			return n
		}
		select {
		case exit := <-n.done:
			n.done <- exit
			require.FailNow(t, "RabbitMQ node exited while starting", "%v\n%s", exit, n.logs())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "RabbitMQ node did not accept connections within 90s", "%v\n%s", err, n.logs())
		}
	}
}

// ctl runs rabbitmqctl against the node and returns its output.
func (n *rabbitNode) ctl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rabbitBinary(t, "rabbitmqctl"), append([]string{"-n", n.name, "-q"}, args...)...)
	cmd.Dir, cmd.Env = n.dir, n.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "rabbitmqctl %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// stop asks the node to stop, kills its process group if it will not, and
// removes its folder.
func (n *rabbitNode) stop(t *testing.T, ctl string) {
	defer os.RemoveAll(n.dir)
	if n.done == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctl, "-n", n.name, "stop")
	cmd.Dir, cmd.Env = n.dir, n.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("rabbitmqctl stop %s: %v\n%s", n.name, err, out)
	}
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		t.Errorf("RabbitMQ node %s did not stop; killing its process group", n.name)
		_ = syscall.Kill(-n.pgid, syscall.SIGKILL)
		<-n.done
	}
}

// logs is the tail of the node's output, for a failure message.
func (n *rabbitNode) logs() string {
	var b strings.Builder
	for _, name := range []string{"server.out", filepath.Join("log", n.name+".log")} {
		data, err := os.ReadFile(filepath.Join(n.dir, name))
		if err != nil {
			continue
		}
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", name, data)
	}
	return b.String()
}

func rabbitBinary(t *testing.T, name string) string {
	t.Helper()
	// The Debian wrappers in /usr/sbin switch users and redirect output; the
	// scripts behind them run the node as they are told.
	if p := filepath.Join("/usr/lib/rabbitmq/bin", name); fileExists(p) {
		return p
	}
	p, err := exec.LookPath(name)
	require.NoError(t, err, "RabbitMQ's %s is required for a private node (apt-get install rabbitmq-server)", name)
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func rabbitUser(t *testing.T) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup("rabbitmq")
	require.NoError(t, err, "running as root, a private RabbitMQ node needs the rabbitmq user")
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	require.NoError(t, errors.Join(err1, err2))
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
