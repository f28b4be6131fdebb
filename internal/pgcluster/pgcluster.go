// Package pgcluster makes a PostgreSQL cluster of a process's own with
// initdb and pg_ctl: in a temporary folder, on a free port of 127.0.0.1,
// as the postgres user when the process runs as root (initdb refuses
// root). The tests (ferrytest/servers' PrivatePostgres) and the bench use
// it for what the shared server cannot do: logical replication, stops and
// restarts.
//
// It owns the cluster's folder and processes, not what runs in it.
package pgcluster

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
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a cluster made by Init.
type Cluster struct {
	// URL reaches the cluster's postgres database as the superuser.
	URL string
	// Port it listens on, on 127.0.0.1.
	Port int
	dir  string // owned by the cluster's user: data/, the log, the socket
	bin  string
	cred *syscall.Credential
	opts string
}

// Init creates a cluster with the binaries in bin (initdb, pg_ctl) in a
// new folder named after prefix, and picks its port; settings are -c
// name=value options beyond the port, socket and listen address. It does
// not start it. On error nothing is left behind.
func Init(ctx context.Context, bin, prefix string, settings []string) (_ *Cluster, err error) {
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		return nil, fmt.Errorf("initdb and pg_ctl are not in %s: %w", bin, err)
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if os.Getuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("this runs as root, and initdb needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if out, err := c.command(ctx, "initdb", "-D", c.DataDir(), "-A", "trust", "-U", "postgres", "-N").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	c.Port = ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	opts := []string{"-p", strconv.Itoa(c.Port), "-k", dir, "-c", "listen_addresses=127.0.0.1"}
	for _, s := range settings {
		opts = append(opts, "-c", s)
	}
	c.opts = strings.Join(opts, " ")
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", c.Port)
	return c, nil
}

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return filepath.Join(c.dir, "data") }

// LogPath is the server's log file.
func (c *Cluster) LogPath() string { return filepath.Join(c.dir, "postgres.log") }

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

func (c *Cluster) pgctl(ctx context.Context, args ...string) error {
	full := append([]string{"-D", c.DataDir(), "-w", "-t", "60"}, args...)
	if out, err := c.command(ctx, "pg_ctl", full...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Start starts the cluster (again) and waits, at most 30s, until it
// accepts connections. A failed start's error carries the server's log.
func (c *Cluster) Start(ctx context.Context) error {
	if err := c.pgctl(ctx, "start", "-l", c.LogPath(), "-o", c.opts); err != nil {
		log, _ := os.ReadFile(c.LogPath())
		return fmt.Errorf("%w\nlog:\n%s", err, log)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, c.URL)
		if err == nil {
			_ = conn.Close(cctx)
			cancel()
			return nil
		}
		cancel()
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("PostgreSQL on port %d does not accept connections: %w", c.Port, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops the cluster: mode "immediate" is a crash (no checkpoint, the
// clients' sockets cut), "fast" a clean shutdown.
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	return c.pgctl(ctx, "stop", "-m", mode)
}

// Remove deletes the cluster's folder (stop it first).
func (c *Cluster) Remove() error {
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("remove the PostgreSQL cluster's folder: %w", err)
	}
	return nil
}

// PostmasterPID is the cluster's main process: the first line of
// postmaster.pid.
func (c *Cluster) PostmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.DataDir(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read the postmaster's pid: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, errors.New("postmaster.pid starts with " + strconv.Quote(first) + ", not a pid")
	}
	return pid, nil
}
