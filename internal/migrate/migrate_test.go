package migrate_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/internal/migrate"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	file := func(sql string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(sql)} }
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []int
		wantErr string
	}{
		{name: "in order", files: fstest.MapFS{"m/0002_b.sql": file("B"), "m/0001_a.sql": file("A")}, want: []int{1, 2}},
		{name: "gap", files: fstest.MapFS{"m/0001_a.sql": file("A"), "m/0003_c.sql": file("C")}, wantErr: "without gaps"},
		{name: "bad name", files: fstest.MapFS{"m/1_a.sql": file("A")}, wantErr: "0001_name.sql"},
		{name: "no folder", files: fstest.MapFS{}, wantErr: "read embedded migrations"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ms, err := migrate.Load(tt.files, "m")
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			var got []int
			for _, m := range ms {
				got = append(got, m.Version)
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestApplyRejectsAnUnsafeTableName(t *testing.T) {
	t.Parallel()
	_, err := migrate.Apply(t.Context(), nil, migrate.Set{Table: `x"; DROP TABLE y; --`}, nil)
	require.ErrorContains(t, err, "table name")
}

// set is a family of test migrations in the test's own schema.
func set(timeout time.Duration, files ...string) migrate.Set {
	fsys := fstest.MapFS{}
	for i, sql := range files {
		fsys[fmt.Sprintf("m/%04d_step%d.sql", i+1, i+1)] = &fstest.MapFile{Data: []byte(sql)}
	}
	return migrate.Set{FS: fsys, Dir: "m", Table: "test_migrations", Lock: "ferry.test.migrate:", Product: "the test", LockTimeout: timeout}
}

// A migration that needs a lock a long transaction holds gives up after the
// lock timeout instead of queueing every other query behind it, changes
// nothing, and says which lock it waited for, who held it and what to do.
func TestApplyGivesUpOnALockAfterTheLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := emptySchema(t)
	first := `CREATE TABLE widgets (id int PRIMARY KEY)`
	_, err := migrate.Apply(ctx, db.Pool, set(0, first), nil)
	require.NoError(t, err)

	// A session idle in transaction, holding ACCESS SHARE on widgets.
	holder, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, `SET application_name = 'long-report'`)
	require.NoError(t, err)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT count(*) FROM widgets`)
	require.NoError(t, err)

	began := time.Now()
	_, err = migrate.Apply(ctx, db.Pool, set(500*time.Millisecond, first, `ALTER TABLE widgets ADD COLUMN name text`), nil)
	took := time.Since(began)
	require.ErrorIs(t, err, migrate.ErrLockTimeout)
	var lte *migrate.LockTimeoutError
	require.ErrorAs(t, err, &lte)
	require.Equal(t, "0002_step2", lte.Migration)
	require.Contains(t, lte.Lock, "AccessExclusiveLock on relation widgets")
	require.Contains(t, lte.Holders, "long-report")
	require.Contains(t, lte.Holders, "idle in transaction")
	for _, s := range []string{"lock_timeout (500ms)", "nothing was changed", "pg_stat_activity", "migrate again"} {
		require.Contains(t, err.Error(), s)
	}
	require.Less(t, took, 5*time.Second, "gave up after the lock timeout")
	var version int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max(version) FROM test_migrations`).Scan(&version))
	require.Equal(t, 1, version, "nothing applied")

	// Once the long transaction ends, the same call succeeds.
	require.NoError(t, tx.Rollback(ctx))
	res, err := migrate.Apply(ctx, db.Pool, set(500*time.Millisecond, first, `ALTER TABLE widgets ADD COLUMN name text`), nil)
	require.NoError(t, err)
	require.Equal(t, 2, res.Current)
}

// A migration that replaces a function keeps what a privilege script set on
// it (schema/roles.sql: SECURITY DEFINER, a fixed search_path, EXECUTE
// revoked from PUBLIC), whether it replaces it in place or drops and creates
// it; a definition with a SET clause states its own attributes.
func TestApplyKeepsTheFunctionPrivilegesAMigrationReplaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := emptySchema(t)
	steps := []string{
		`CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1';
		 CREATE FUNCTION g(a int, b text) RETURNS int LANGUAGE sql AS 'SELECT a';
		 CREATE FUNCTION h() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
	}
	_, err := migrate.Apply(ctx, db.Pool, set(0, steps...), nil)
	require.NoError(t, err)
	s := pgx.Identifier{db.Schema}.Sanitize()
	for _, fn := range []string{"f()", "g(int, text)", "h()"} {
		_, err = db.Pool.Exec(ctx, fmt.Sprintf(`ALTER FUNCTION %[1]s.%[2]s SECURITY DEFINER SET search_path = %[1]s, pg_temp;
			REVOKE ALL ON FUNCTION %[1]s.%[2]s FROM PUBLIC`, s, fn))
		require.NoError(t, err)
	}
	steps = append(steps,
		`CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 2'`,
		`DROP FUNCTION g(int, text); CREATE FUNCTION g(a int, b text) RETURNS int LANGUAGE sql AS 'SELECT a + 1'`,
		`CREATE OR REPLACE FUNCTION h() RETURNS int LANGUAGE sql SECURITY INVOKER SET search_path = public AS 'SELECT 2'`,
	)
	res, err := migrate.Apply(ctx, db.Pool, set(0, steps...), nil)
	require.NoError(t, err)
	require.Len(t, res.Applied, 3)

	props := func(name string) (secdef bool, config, acl string) {
		t.Helper()
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT prosecdef, coalesce(array_to_string(proconfig, ';'), ''), coalesce(proacl::text, '')
			FROM pg_proc WHERE proname = $1 AND pronamespace = current_schema()::regnamespace`, name).Scan(&secdef, &config, &acl))
		return secdef, config, acl
	}
	for _, fn := range []string{"f", "g"} {
		secdef, config, acl := props(fn)
		require.True(t, secdef, "%s: SECURITY DEFINER kept", fn)
		require.Equal(t, "search_path="+db.Schema+", pg_temp", config, "%s: search_path kept", fn)
		require.NotRegexp(t, `[{,]=X/`, acl, "%s: PUBLIC still has no EXECUTE", fn)
		require.NotEmpty(t, acl, "%s: grants not back to the default", fn)
	}
	// The migration stated SECURITY INVOKER and a search_path for h (a SET
	// clause): it wins for those; the grants are kept.
	secdef, config, acl := props("h")
	require.False(t, secdef)
	require.Equal(t, "search_path=public", config)
	require.NotRegexp(t, `[{,]=X/`, acl)
	var two int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT f() + g(1, 'x')`).Scan(&two))
	require.Equal(t, 4, two, "the new bodies are in place")
}

// testDB is a schema of the test's own.
type testDB struct {
	Pool   *pgxpool.Pool
	Schema string
}

// emptySchema creates a schema without any tables (the engine's tests
// apply sets of their own; ferrytest.NewDB, which applies Ferry's, stands
// on this package) on FERRY_TEST_POSTGRES_URL's server, dropped at
// cleanup.
func emptySchema(t *testing.T) testDB {
	t.Helper()
	base := cmp.Or(os.Getenv("FERRY_TEST_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test")
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err, "PostgreSQL is required at FERRY_TEST_POSTGRES_URL (default the local server's test database)")
	defer admin.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "ferry_test_" + hex.EncodeToString(b)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		conn, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return testDB{Pool: pool, Schema: name}
}
