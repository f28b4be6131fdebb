package migrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Result says what Apply did.
type Result struct {
	// Applied lists the migrations this call applied, in order.
	Applied []Migration
	// Current is the schema version after the call.
	Current int
}

// Set is one family of migrations and where its progress is recorded.
type Set struct {
	// FS holds the files, named like 0001_name.sql, in Dir.
	FS  fs.FS
	Dir string
	// Table records the applied versions in the current schema, e.g.
	// "ferry_schema_migrations". It must match ^[a-z_][a-z0-9_]{0,62}$.
	Table string
	// Lock names the advisory lock that serialises concurrent Apply calls
	// on one schema; the schema's name is appended to it.
	Lock string
	// Product names what to upgrade when the database is ahead of the
	// binary, e.g. "Ferry".
	Product string
	// LockTimeout bounds how long each migration waits for a lock
	// (PostgreSQL's lock_timeout, set per migration). An ALTER TABLE queued
	// behind a long transaction would otherwise make every later query on
	// that table queue behind it: the relay and the producers would stall
	// for as long as the migration waits. When it trips, Apply returns a
	// *LockTimeoutError and nothing has changed. Default 10s
	// (DefaultLockTimeout); negative: wait as long as it takes.
	LockTimeout time.Duration
}

// DefaultLockTimeout is Set.LockTimeout's default.
const DefaultLockTimeout = 10 * time.Second

// ErrLockTimeout is returned (as a *LockTimeoutError) when a migration
// waited longer than Set.LockTimeout for a lock. Retryable: nothing was
// changed, and the migration succeeds once the lock is free.
var ErrLockTimeout = errors.New("migration lock timeout")

// LockTimeoutError says which migration waited for which lock, and who held
// it, as far as Apply could see it while it waited.
type LockTimeoutError struct {
	Migration string        // e.g. "0008_checks"
	Timeout   time.Duration // the lock_timeout that tripped
	// Lock is the lock that was waited for, e.g. "AccessExclusiveLock on
	// relation outbox_events"; empty when the wait was too short to see.
	Lock string
	// Holders describes the sessions that blocked it (pid, application,
	// state, transaction age, query).
	Holders string
	Err     error // PostgreSQL's error (SQLSTATE 55P03)
}

func (e *LockTimeoutError) Error() string {
	lock := e.Lock
	if lock == "" {
		lock = "a lock"
	}
	held := ""
	if e.Holders != "" {
		held = ", held by " + e.Holders
	}
	return fmt.Sprintf("apply %s: waited lock_timeout (%s) for %s%s; nothing was changed. "+
		"A long or idle-in-transaction session holds it: find it with "+
		"SELECT pid, application_name, state, xact_start, query FROM pg_stat_activity WHERE xact_start < now() - interval '1 minute' ORDER BY xact_start, "+
		"let it finish (or end it with pg_terminate_backend(pid)), then migrate again; or raise the lock timeout",
		e.Migration, e.Timeout, lock, held)
}

func (e *LockTimeoutError) Unwrap() []error { return []error{ErrLockTimeout, e.Err} }

var (
	fileName  = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)
	tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

// Load reads the set's migrations in version order and checks that they run
// 1, 2, 3… without gaps.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q: name must look like 0001_name.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: m[2], SQL: string(b)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %04d_%s: versions must run 1, 2, 3… without gaps", m.Version, m.Name)
		}
	}
	return out, nil
}

// Apply applies every migration of set that the current schema lacks, all
// in one transaction: either the schema moves to the newest version or
// nothing changes. progress, when not nil, is called before each migration
// runs. Concurrent calls on one schema serialise on a transaction-scoped
// advisory lock, so a crashed migrator never leaves it held; other schemas
// migrate in parallel. Each migration runs under set.LockTimeout.
//
// A migration that replaces a function (CREATE OR REPLACE, or DROP and
// CREATE) resets what the migration does not state: SECURITY DEFINER and
// SET clauses, and, for a new function, its grants. Those are what an
// operator's privilege script (schema/roles.sql) put there, and losing them
// breaks producers at their next insert; so Apply puts back, for every
// function of the schema with the same signature, the SECURITY DEFINER and
// the settings it had before when the new definition states neither (one
// that has a SET clause states its own), and the EXECUTE grants when the
// function was created anew.
func Apply(ctx context.Context, pool *pgxpool.Pool, set Set, progress func(Migration)) (Result, error) {
	if !tableName.MatchString(set.Table) {
		return Result{}, fmt.Errorf("migrate: table name %q: must match %s", set.Table, tableName)
	}
	migrations, err := Load(set.FS, set.Dir)
	if err != nil {
		return Result{}, err
	}
	timeout := set.LockTimeout
	switch {
	case timeout == 0:
		timeout = DefaultLockTimeout
	case timeout < 0:
		timeout = 0 // lock_timeout 0: no limit
	}
	table := pgx.Identifier{set.Table}.Sanitize()
	var res Result
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1 || current_schema()))`, set.Lock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		// After the advisory lock: a second migrator waits for the first
		// to finish, however long it takes; only table locks are bounded.
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", timeout.Milliseconds())); err != nil {
			return fmt.Errorf("set lock_timeout: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return lockError(fmt.Sprintf("create %s", set.Table), timeout, nil, err)
		}
		rows, err := tx.Query(ctx, `SELECT version FROM `+table)
		if err != nil {
			return fmt.Errorf("read applied versions: %w", err)
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return fmt.Errorf("read applied versions: %w", err)
		}
		for _, v := range applied {
			if int(v) > len(migrations) {
				return fmt.Errorf("database is at schema version %d, newer than this binary knows (%d): upgrade %s", v, len(migrations), set.Product)
			}
			res.Current = max(res.Current, int(v))
		}
		var pid int32
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return fmt.Errorf("backend pid: %w", err)
		}
		before, err := functions(ctx, tx)
		if err != nil {
			return err
		}
		for _, m := range migrations {
			if slices.Contains(applied, int32(m.Version)) {
				continue
			}
			if progress != nil {
				progress(m)
			}
			name := fmt.Sprintf("%04d_%s", m.Version, m.Name)
			w := watchLocks(ctx, pool, pid)
			_, err := tx.Exec(ctx, m.SQL)
			seen := w()
			if err != nil {
				return lockError(name, timeout, seen, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return fmt.Errorf("record %s: %w", name, err)
			}
			res.Applied = append(res.Applied, m)
			res.Current = m.Version
		}
		if len(res.Applied) == 0 {
			return nil
		}
		return restoreFunctions(ctx, tx, before)
	})
	if err != nil {
		return Result{}, fmt.Errorf("migrate: %w", err)
	}
	return res, nil
}

// lockError turns a lock_timeout (SQLSTATE 55P03, lock_not_available) into
// a *LockTimeoutError and wraps any other error of step.
func lockError(step string, timeout time.Duration, seen *lockWait, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		e := &LockTimeoutError{Migration: step, Timeout: timeout, Err: err}
		if seen != nil {
			e.Lock, e.Holders = seen.lock, seen.holders
		}
		return e
	}
	return fmt.Errorf("apply %s: %w", step, err)
}

// lockWait is a lock the migration's session waited for.
type lockWait struct{ lock, holders string }

// sqlWaitingLock describes the lock backend $1 waits for, and the sessions
// that block it (pg_blocking_pids).
const sqlWaitingLock = `SELECT l.mode || ' on ' || l.locktype ||
       coalesce(' ' || l.relation::regclass::text, ''),
       coalesce((SELECT string_agg(format('pid %s (application %L, %s, transaction open %s, query %L)',
                    a.pid, a.application_name, a.state, date_trunc('second', now() - a.xact_start), left(a.query, 80)), '; ')
                 FROM pg_stat_activity a WHERE a.pid = ANY (pg_blocking_pids($1))), '')
FROM pg_locks l WHERE l.pid = $1 AND NOT l.granted LIMIT 1`

// watchLocks looks, on a connection of its own, every 50ms for a lock the
// migration's session (pid) waits for, until the returned func is called;
// that returns the last wait it saw, or nil. Best effort: when the pool has
// no connection to spare, it sees nothing.
func watchLocks(ctx context.Context, pool *pgxpool.Pool, pid int32) func() *lockWait {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan *lockWait, 1)
	go func() {
		var last *lockWait
		defer func() { done <- last }()
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return
		}
		defer conn.Release()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			var w lockWait
			if err := conn.QueryRow(ctx, sqlWaitingLock, pid).Scan(&w.lock, &w.holders); err == nil {
				last = &w
			}
		}
	}()
	return func() *lockWait { cancel(); return <-done }
}

// function is what a privilege script may have set on a function.
type function struct {
	secdef   bool
	config   []string // proconfig: name=value
	aclSet   bool     // proacl is not NULL (grants were changed from the default)
	grantees []string // EXECUTE grantees other than the owner; "" is PUBLIC
}

// sqlFunctions lists the current schema's functions by signature.
const sqlFunctions = `SELECT quote_ident(n.nspname) || '.' || quote_ident(p.proname) || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       p.prosecdef, coalesce(p.proconfig, '{}'), p.proacl IS NOT NULL,
       coalesce((SELECT array_agg(CASE WHEN x.grantee = 0 THEN '' ELSE x.grantee::regrole::text END ORDER BY x.grantee)
                 FROM aclexplode(p.proacl) x
                 WHERE x.privilege_type = 'EXECUTE' AND x.grantee <> p.proowner), '{}')
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema()`

func functions(ctx context.Context, tx pgx.Tx) (map[string]function, error) {
	rows, err := tx.Query(ctx, sqlFunctions)
	if err != nil {
		return nil, fmt.Errorf("read functions: %w", err)
	}
	out := map[string]function{}
	var (
		sig string
		f   function
	)
	_, err = pgx.ForEachRow(rows, []any{&sig, &f.secdef, &f.config, &f.aclSet, &f.grantees}, func() error {
		out[sig] = function{secdef: f.secdef, config: slices.Clone(f.config), aclSet: f.aclSet, grantees: slices.Clone(f.grantees)}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read functions: %w", err)
	}
	return out, nil
}

// restoreFunctions puts back, on each function the migrations replaced,
// the SECURITY DEFINER, the settings and the grants it had in before and
// lost.
func restoreFunctions(ctx context.Context, tx pgx.Tx, before map[string]function) error {
	after, err := functions(ctx, tx)
	if err != nil {
		return err
	}
	exec := func(sig, stmt string, args ...any) error {
		if _, err := tx.Exec(ctx, stmt, args...); err != nil {
			return fmt.Errorf("restore the privileges of %s: %w", sig, err)
		}
		return nil
	}
	for sig, old := range before {
		now, ok := after[sig]
		if !ok {
			continue // dropped for good
		}
		// sig is PostgreSQL's own rendering, schema-qualified and quoted
		// (sqlFunctions): an identifier it printed, not input.
		// A function with neither SECURITY DEFINER nor settings was
		// replaced by a definition that stated neither: it gets back what
		// it had. A definition with a SET clause stated its attributes.
		reset := !now.secdef && len(now.config) == 0
		if reset && old.secdef {
			if err := exec(sig, "ALTER FUNCTION "+sig+" SECURITY DEFINER"); err != nil {
				return err
			}
		}
		if old.aclSet && !now.aclSet {
			if err := exec(sig, "REVOKE ALL ON FUNCTION "+sig+" FROM PUBLIC"); err != nil {
				return err
			}
			for _, g := range old.grantees {
				to := cmp.Or(g, "PUBLIC") // regrole's text, quoted as needed
				if err := exec(sig, "GRANT EXECUTE ON FUNCTION "+sig+" TO "+to); err != nil {
					return err
				}
			}
		}
		if !reset {
			continue
		}
		for _, kv := range old.config {
			name, value, _ := strings.Cut(kv, "=")
			// set_config parses a list (search_path) as SET does, and SET
			// FROM CURRENT copies it onto the function; then the session's
			// own value comes back.
			var orig string
			if err := tx.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&orig); err != nil {
				return fmt.Errorf("restore the privileges of %s: %w", sig, err)
			}
			if err := exec(sig, `SELECT set_config($1, $2, true)`, name, value); err != nil {
				return err
			}
			if err := exec(sig, "ALTER FUNCTION "+sig+" SET "+pgx.Identifier{name}.Sanitize()+" FROM CURRENT"); err != nil {
				return err
			}
			if err := exec(sig, `SELECT set_config($1, $2, true)`, name, orig); err != nil {
				return err
			}
		}
	}
	return nil
}
