package pgcluster_test

import (
	"cmp"
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/internal/pgcluster"
)

// A cluster starts with its settings, restarts after a crash, names its
// postmaster, and leaves nothing behind once removed.
func TestClusterLifecycle(t *testing.T) {
	ctx := context.Background()
	bin := cmp.Or(os.Getenv("FERRY_TEST_PG_BIN"), "/usr/lib/postgresql/15/bin")
	c, err := pgcluster.Init(ctx, bin, "ferry-pgcluster-test-", []string{"wal_level=logical", "fsync=off"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(ctx, "immediate"); _ = c.Remove() })
	require.NoError(t, c.Start(ctx))
	pid, err := c.PostmasterPID()
	require.NoError(t, err)
	require.Positive(t, pid)

	conn, err := pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	var level string
	require.NoError(t, conn.QueryRow(ctx, `SHOW wal_level`).Scan(&level))
	require.Equal(t, "logical", level)
	_ = conn.Close(ctx)

	require.NoError(t, c.Stop(ctx, "immediate"))
	require.NoError(t, c.Start(ctx), "starts again after a crash")
	require.NoError(t, c.Stop(ctx, "fast"))
	require.NoError(t, c.Remove())
	_, err = os.Stat(c.DataDir())
	require.ErrorIs(t, err, os.ErrNotExist)

	_, err = pgcluster.Init(ctx, t.TempDir(), "ferry-pgcluster-test-", nil)
	require.ErrorContains(t, err, "initdb and pg_ctl are not in")
}
