package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// cluster is a PostgreSQL cluster of the bench's own, with
// wal_level=logical, for runs of Ferry's log-tailing source (the shared
// server runs with wal_level=replica). It is made as internal/testenv's
// PrivatePostgres is, without testing.TB: initdb and pg_ctl, as the
// postgres user when the bench runs as root, in a temporary folder, on a
// free port; stop removes it. Unlike the tests' clusters it keeps fsync
// on: the bench measures commits.
type cluster struct {
	// URL reaches the cluster's postgres database as the superuser.
	URL  string
	port int
	dir  string // owned by the cluster's user: data/, the log, the socket
	bin  string
	cred *syscall.Credential
	// stopped makes stop safe to call twice.
	stopped bool
}

// clusterSettings are the cluster's -c options beyond the port, socket and
// listen address: logical decoding, and slots and senders to spare (the
// bench uses one slot per Ferry run with --source wal and drops it after).
var clusterSettings = []string{"wal_level=logical", "max_wal_senders=10", "max_replication_slots=10"}

// startCluster creates and starts a cluster with the binaries in bin, and
// waits until it accepts connections.
func startCluster(ctx context.Context, bin string) (_ *cluster, err error) {
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		return nil, fmt.Errorf("the bench's own PostgreSQL (-sources with wal) needs initdb and pg_ctl in %s (pass -pg-bin): %w", bin, err)
	}
	dir, err := os.MkdirTemp("", "ferry-bench-pg-")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL cluster: %w", err)
	}
	c := &cluster{dir: dir, bin: bin}
	defer func() {
		if err != nil {
			_ = c.stop("")
		}
	}()
	if os.Getuid() == 0 {
		// initdb refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL cluster: the bench runs as root, and initdb needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, fmt.Errorf("PostgreSQL cluster: %w", err)
		}
	}
	if out, err := c.command(ctx, "initdb", "-D", c.data(), "-A", "trust", "-U", "postgres", "-N").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("PostgreSQL cluster: initdb: %w\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL cluster: find a free port: %w", err)
	}
	c.port = ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	opts := []string{"-p", strconv.Itoa(c.port), "-k", dir, "-c", "listen_addresses=127.0.0.1"}
	for _, s := range clusterSettings {
		opts = append(opts, "-c", s)
	}
	if err := c.pgctl(ctx, "start", "-l", c.logPath(), "-o", strings.Join(opts, " ")); err != nil {
		log, _ := os.ReadFile(c.logPath())
		return nil, fmt.Errorf("PostgreSQL cluster: %w\nlog:\n%s", err, log)
	}
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", c.port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, c.URL)
		if err == nil {
			_ = conn.Close(cctx)
			cancel()
			return c, nil
		}
		cancel()
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("PostgreSQL cluster on port %d does not accept connections: %w", c.port, err)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

func (c *cluster) data() string    { return filepath.Join(c.dir, "data") }
func (c *cluster) logPath() string { return filepath.Join(c.dir, "postgres.log") }

func (c *cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

func (c *cluster) pgctl(ctx context.Context, args ...string) error {
	full := append([]string{"-D", c.data(), "-w", "-t", "60"}, args...)
	if out, err := c.command(ctx, "pg_ctl", full...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl %s: %w\n%s", args[0], err, out)
	}
	return nil
}

// postmasterPID is the cluster's main process: the first line of
// postmaster.pid.
func (c *cluster) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.data(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read the postmaster's pid: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid starts with %q, not a pid", first)
	}
	return pid, nil
}

// stop stops the cluster (a fast shutdown), copies its log to keepLog
// unless that is empty, and removes its folder. Safe to call twice.
func (c *cluster) stop(keepLog string) error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	// Detached: the bench's context is usually cancelled by now (Ctrl-C),
	// and a cluster left running would outlive the bench. pg_ctl's own -t
	// bounds the wait.
	err := c.pgctl(context.Background(), "stop", "-m", "fast")
	if keepLog != "" {
		if cerr := copyFile(c.logPath(), keepLog); cerr != nil && err == nil {
			err = cerr
		}
	}
	if rerr := os.RemoveAll(c.dir); rerr != nil && err == nil {
		err = fmt.Errorf("remove the PostgreSQL cluster's folder: %w", rerr)
	}
	return err
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("keep the PostgreSQL log: %w", err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return fmt.Errorf("keep the PostgreSQL log: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("keep the PostgreSQL log: %w", err)
	}
	return out.Close()
}
