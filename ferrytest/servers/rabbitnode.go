package servers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
)

// RabbitNode is a RabbitMQ node of one test's own, for what the shared
// broker must not be put through: its settings changed, or a stop and a
// restart. It has its own node name, ports, data folder and Erlang cookie
// (design-notes.md, "A private RabbitMQ node"); it keeps its data across
// Stop and Start (durable queues and persistent messages survive), and is
// stopped and removed at cleanup. Starting one takes several seconds:
// share it between subtests.
type RabbitNode struct {
	// URL reaches the node as guest (loopback_users = none).
	URL  string
	Name string // node@localhost

	dir    string
	env    []string
	cred   *syscall.Credential // as the rabbitmq user when the test runs as root
	server string
	ctlBin string
	pgid   int        // the running server's process group (Setpgid)
	done   chan error // the running server's exit; nil when stopped
}

// StartRabbitNode starts a node whose rabbitmq.conf adds conf (lines of
// rabbitmq.conf, may be empty) to the listener settings. It fails the test,
// never skips, without RabbitMQ.
func StartRabbitNode(t testing.TB, conf string) *RabbitNode {
	t.Helper()
	dir, err := os.MkdirTemp("", "ferry-rabbit-")
	if err != nil {
		t.Fatalf("private RabbitMQ node: %v", err)
	}
	n := &RabbitNode{Name: nodeName() + "@localhost", dir: dir,
		server: rabbitBinary(t, "rabbitmq-server"), ctlBin: rabbitBinary(t, "rabbitmqctl")}
	t.Cleanup(func() {
		defer os.RemoveAll(n.dir)
		if n.done != nil {
			n.stop(t, true)
		}
	})

	port, distPort := freePort(t), freePort(t)
	n.URL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port)
	files := map[string]string{
		"rabbitmq.conf":   fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n%s\n", port, conf),
		"enabled_plugins": "[].\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatalf("private RabbitMQ node: %v", err)
		}
	}
	n.env = append(os.Environ(),
		"HOME="+dir, // the node's own Erlang cookie, shared with rabbitmqctl
		"RABBITMQ_NODENAME="+n.Name,
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
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatalf("private RabbitMQ node: %v", err)
		}
		err := filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Chown(path, int(n.cred.Uid), int(n.cred.Gid))
		})
		if err != nil {
			t.Fatalf("private RabbitMQ node: %v", err)
		}
	}
	n.Start(t)
	return n
}

// Start starts the node (again, on its data) and waits until it accepts
// connections.
func (n *RabbitNode) Start(t testing.TB) {
	t.Helper()
	if n.done != nil {
		t.Fatalf("RabbitMQ node %s is already running", n.Name)
	}
	out, err := os.OpenFile(filepath.Join(n.dir, "server.out"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("private RabbitMQ node: %v", err)
	}
	defer out.Close()
	cmd := exec.Command(n.server)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = n.dir, n.env, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: n.cred}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", n.server, err)
	}
	n.pgid = cmd.Process.Pid
	done := make(chan error, 1)
	n.done = done
	go func() { done <- cmd.Wait() }()

	deadline := time.Now().Add(90 * time.Second)
	for {
		conn, err := amqp.Dial(n.URL)
		if err == nil {
			_ = conn.Close()
			return
		}
		select {
		case exit := <-done:
			done <- exit
			t.Fatalf("RabbitMQ node exited while starting: %v\n%s", exit, n.logs())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("RabbitMQ node did not accept connections within 90s: %v\n%s", err, n.logs())
		}
	}
}

// Stop stops the node cleanly (rabbitmqctl stop: the Erlang VM exits) and
// waits until it is gone; its data stay for Start.
func (n *RabbitNode) Stop(t testing.TB) {
	t.Helper()
	if n.done == nil {
		t.Fatalf("RabbitMQ node %s is not running", n.Name)
	}
	n.stop(t, false)
}

func (n *RabbitNode) stop(t testing.TB, cleanup bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.ctlBin, "-n", n.Name, "stop")
	cmd.Dir, cmd.Env = n.dir, n.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("rabbitmqctl stop %s: %v\n%s", n.Name, err, out)
	}
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		if !cleanup {
			t.Errorf("RabbitMQ node %s did not stop; killing its process group", n.Name)
		}
		_ = syscall.Kill(-n.pgid, syscall.SIGKILL)
		<-n.done
	}
	n.done = nil
}

// Ctl runs rabbitmqctl against the node and returns its output.
func (n *RabbitNode) Ctl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.ctlBin, append([]string{"-n", n.Name, "-q"}, args...)...)
	cmd.Dir, cmd.Env = n.dir, n.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// logs is the tail of the node's output, for a failure message.
func (n *RabbitNode) logs() string {
	var b strings.Builder
	for _, name := range []string{"server.out", filepath.Join("log", n.Name+".log")} {
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

func rabbitBinary(t testing.TB, name string) string {
	t.Helper()
	// The Debian wrappers in /usr/sbin switch users and redirect output; the
	// scripts behind them run the node as they are told.
	p := filepath.Join("/usr/lib/rabbitmq/bin", name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("RabbitMQ's %s is required for a private node (apt-get install rabbitmq-server): %v", name, err)
	}
	return p
}

func rabbitUser(t testing.TB) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup("rabbitmq")
	if err != nil {
		t.Fatalf("running as root, a private RabbitMQ node needs the rabbitmq user: %v", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		t.Fatalf("rabbitmq user ids %s:%s", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// nodeName is a node name of the test's own.
func nodeName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ferrytest_" + hex.EncodeToString(b)
}
