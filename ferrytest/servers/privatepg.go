package servers

import (
	"cmp"
	"context"
	"os"
	"testing"

	"github.com/ferry-outbox/ferry/internal/pgcluster"
)

// PrivatePostgres is a PostgreSQL cluster of one test's own, for what the
// shared server cannot do: logical replication (wal_level=logical) and
// stops and restarts. It is a pgcluster.Cluster (initdb and pg_ctl as the
// postgres user when the tests run as root, a temporary folder, a free
// port), stopped and removed at cleanup. The binaries are in
// FERRY_TEST_PG_BIN, default /usr/lib/postgresql/15/bin.
type PrivatePostgres struct {
	// URL reaches the cluster's postgres database as the superuser.
	URL     string
	Port    int
	cluster *pgcluster.Cluster
}

// StartPrivatePostgres creates and starts a cluster with wal_level=logical;
// settings are more -c name=value options. The test fails (never skips)
// when the binaries are missing.
func StartPrivatePostgres(t testing.TB, settings ...string) *PrivatePostgres {
	t.Helper()
	bin := cmp.Or(os.Getenv("FERRY_TEST_PG_BIN"), "/usr/lib/postgresql/15/bin")
	opts := append([]string{"wal_level=logical", "max_wal_senders=20", "max_replication_slots=20", "fsync=off"}, settings...)
	c, err := pgcluster.Init(context.Background(), bin, "ferry-pg-", opts)
	if err != nil {
		t.Fatalf("private PostgreSQL (set FERRY_TEST_PG_BIN for the binaries): %v", err)
	}
	t.Cleanup(func() {
		_ = c.Stop(context.Background(), "immediate")
		_ = c.Remove()
	})
	p := &PrivatePostgres{URL: c.URL, Port: c.Port, cluster: c}
	p.Start(t)
	return p
}

// Start starts the cluster (again) and waits until it accepts connections.
func (p *PrivatePostgres) Start(t testing.TB) {
	t.Helper()
	if err := p.cluster.Start(context.Background()); err != nil {
		t.Fatalf("private PostgreSQL: %v", err)
	}
}

// Stop stops the cluster: mode "immediate" is a crash (no checkpoint, the
// clients' sockets cut), "fast" a clean shutdown.
func (p *PrivatePostgres) Stop(t testing.TB, mode string) {
	t.Helper()
	if err := p.cluster.Stop(context.Background(), mode); err != nil {
		t.Fatalf("private PostgreSQL: %v", err)
	}
}
