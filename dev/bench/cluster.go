package bench

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/ferry-outbox/ferry/internal/pgcluster"
)

// cluster is a PostgreSQL cluster of the bench's own, with
// wal_level=logical, for runs of Ferry's log-tailing source (the shared
// server runs with wal_level=replica): a pgcluster.Cluster, as the tests'
// PrivatePostgres is; stop removes it. Unlike the tests' clusters it keeps
// fsync on: the bench measures commits.
type cluster struct {
	*pgcluster.Cluster
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
	pc, err := pgcluster.Init(ctx, bin, "ferry-bench-pg-", clusterSettings)
	if err != nil {
		return nil, fmt.Errorf("the bench's own PostgreSQL (-sources with wal; pass -pg-bin for the binaries): %w", err)
	}
	c := &cluster{Cluster: pc}
	if err := c.Start(ctx); err != nil {
		_ = c.stop("")
		return nil, fmt.Errorf("PostgreSQL cluster: %w", err)
	}
	return c, nil
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
	err := c.Stop(context.Background(), "fast")
	if keepLog != "" {
		if cerr := copyFile(c.LogPath(), keepLog); cerr != nil && err == nil {
			err = cerr
		}
	}
	if rerr := c.Remove(); rerr != nil && err == nil {
		err = rerr
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
