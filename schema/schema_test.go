package schema_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/schema"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestMigrationsAreNumberedWithoutGaps(t *testing.T) {
	t.Parallel()
	ms, err := schema.Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	for i, m := range ms {
		require.Equal(t, i+1, m.Version, "migration %s", m.Name)
		require.NotEmpty(t, m.SQL)
	}
}

// testenv.Postgres already migrated the schema once; running Migrate again,
// from several goroutines at once, must apply nothing and fail nowhere.
func TestMigrateIsIdempotentAndSafeConcurrently(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()

	var wg sync.WaitGroup
	results := make([]schema.Result, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = schema.Migrate(ctx, db.Pool, nil)
		}()
	}
	wg.Wait()
	ms, err := schema.Migrations()
	require.NoError(t, err)
	for i := range results {
		require.NoError(t, errs[i])
		require.Empty(t, results[i].Applied)
		require.Equal(t, len(ms), results[i].Current)
	}
}

// Two processes migrating an empty schema at the same moment: one applies,
// the other waits on the advisory lock and finds nothing to do.
func TestMigrateFreshSchemaConcurrently(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "") // for a connection; we migrate a second, empty schema
	ctx := context.Background()
	name := ferrytest.Name("ferry_fresh")
	_, err := db.Pool.Exec(ctx, "CREATE SCHEMA "+name)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE") })

	pool, err := pgxpool.New(ctx, ferrytest.WithSearchPath(ferrytest.PostgresURL(), name))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var wg sync.WaitGroup
	applied := make([]int, 2)
	errs := make([]error, 2)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := schema.Migrate(ctx, pool, nil)
			applied[i], errs[i] = len(res.Applied), err
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	ms, _ := schema.Migrations()
	require.Equal(t, len(ms), applied[0]+applied[1], "exactly one migrator applies each migration")

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry_schema_migrations`).Scan(&n))
	require.Equal(t, len(ms), n)
}
