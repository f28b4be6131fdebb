package testenv

import (
	"cmp"
	"context"
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

	"github.com/jackc/pgx/v5"
)

// PrivatePostgres is a PostgreSQL cluster of one test's own, for what the
// shared server cannot do: logical replication (wal_level=logical) and
// stops and restarts. initdb and pg_ctl run as the postgres user when the
// tests run as root; the cluster lives in a temporary folder on a free port
// and is stopped and removed at cleanup. The binaries are in
// FERRY_TEST_PG_BIN, default /usr/lib/postgresql/15/bin.
type PrivatePostgres struct {
	// URL reaches the cluster's postgres database as the superuser.
	URL  string
	Port int
	dir  string // owned by the cluster's user: data/, the log, the socket
	bin  string
	cred *syscall.Credential
	opts string
}

// StartPrivatePostgres creates and starts a cluster with wal_level=logical;
// settings are more -c name=value options. The test fails (never skips)
// when the binaries are missing.
func StartPrivatePostgres(t testing.TB, settings ...string) *PrivatePostgres {
	t.Helper()
	bin := cmp.Or(os.Getenv("FERRY_TEST_PG_BIN"), "/usr/lib/postgresql/15/bin")
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		t.Fatalf("a private PostgreSQL needs initdb and pg_ctl in %s (set FERRY_TEST_PG_BIN): %v", bin, err)
	}
	dir, err := os.MkdirTemp("", "ferry-pg-")
	if err != nil {
		t.Fatalf("private PostgreSQL: %v", err)
	}
	p := &PrivatePostgres{dir: dir, bin: bin}
	t.Cleanup(func() {
		_ = p.pgctl("stop", "-m", "immediate")
		_ = os.RemoveAll(dir)
	})
	if os.Getuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("private PostgreSQL: the tests run as root, and initdb needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("private PostgreSQL: %v", err)
		}
	}
	if out, err := p.command("initdb", "-D", p.data(), "-A", "trust", "-U", "postgres", "-N").CombinedOutput(); err != nil {
		t.Fatalf("private PostgreSQL: initdb: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("private PostgreSQL: find a free port: %v", err)
	}
	p.Port = ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	opts := []string{"-p", strconv.Itoa(p.Port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "wal_level=logical",
		"-c", "max_wal_senders=20", "-c", "max_replication_slots=20", "-c", "fsync=off"}
	for _, s := range settings {
		opts = append(opts, "-c", s)
	}
	p.opts = strings.Join(opts, " ")
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", p.Port)
	p.Start(t)
	return p
}

func (p *PrivatePostgres) data() string { return filepath.Join(p.dir, "data") }

func (p *PrivatePostgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

func (p *PrivatePostgres) pgctl(args ...string) error {
	full := append([]string{"-D", p.data(), "-w", "-t", "60"}, args...)
	if out, err := p.command("pg_ctl", full...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Start starts the cluster (again) and waits until it accepts connections.
func (p *PrivatePostgres) Start(t testing.TB) {
	t.Helper()
	if err := p.pgctl("start", "-l", filepath.Join(p.dir, "postgres.log"), "-o", p.opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
		t.Fatalf("private PostgreSQL: %v\nlog:\n%s", err, log)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, p.URL)
		if err == nil {
			_ = conn.Close(ctx)
			cancel()
			return
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("private PostgreSQL on port %d does not accept connections: %v", p.Port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the cluster: mode "immediate" is a crash (no checkpoint, the
// clients' sockets cut), "fast" a clean shutdown.
func (p *PrivatePostgres) Stop(t testing.TB, mode string) {
	t.Helper()
	if err := p.pgctl("stop", "-m", mode); err != nil {
		t.Fatalf("private PostgreSQL: %v", err)
	}
}

// DB creates a fresh schema in the cluster with Ferry's migrations applied,
// as Postgres does on the shared server.
func (p *PrivatePostgres) DB(t testing.TB) *DB {
	t.Helper()
	return postgresIn(t, p.URL)
}
