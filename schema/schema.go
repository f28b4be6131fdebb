package schema

import (
	"context"
	"embed"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-outbox/ferry/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one numbered SQL file.
type Migration = migrate.Migration

// Result says what Migrate did.
type Result = migrate.Result

// set is the outbox's migrations. The table and the lock key are part of
// the deployed contract: an older binary migrating concurrently takes the
// same lock, hashtext('ferry.migrate:' || current_schema()).
var set = migrate.Set{
	FS:      migrationFiles,
	Dir:     "migrations",
	Table:   "ferry_schema_migrations",
	Lock:    "ferry.migrate:",
	Product: "Ferry",
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	return migrate.Load(set.FS, set.Dir)
}

// Migrate applies every embedded migration that the database lacks, all in
// one transaction: either the schema moves to the newest version or nothing
// changes. progress, when not nil, is called before each migration runs.
// Concurrent calls on one schema serialise on an advisory lock. Each
// migration waits at most DefaultLockTimeout (10s) for a table lock
// (MigrateWith sets it).
//
// A migration that replaces a function keeps what schema/roles.sql set on
// it (SECURITY DEFINER, its search_path, EXECUTE revoked from PUBLIC): the
// privilege script need not run again for producers to keep working.
func Migrate(ctx context.Context, pool *pgxpool.Pool, progress func(Migration)) (Result, error) {
	return MigrateWith(ctx, pool, MigrateOptions{Progress: progress})
}

// MigrateOptions tune MigrateWith.
type MigrateOptions struct {
	// LockTimeout bounds how long each migration waits for a lock on a
	// table (PostgreSQL's lock_timeout), so that a migration queued behind
	// a long transaction does not stall every producer and the relay
	// behind it. When it trips, nothing has changed and the error is a
	// *LockTimeoutError (errors.Is ErrLockTimeout, retryable) that names
	// the lock and who held it. Default 10s; negative: no limit.
	LockTimeout time.Duration
	// Progress, when not nil, is called before each migration runs.
	Progress func(Migration)
}

// DefaultLockTimeout is MigrateOptions.LockTimeout's default.
const DefaultLockTimeout = migrate.DefaultLockTimeout

// ErrLockTimeout: a migration waited longer than its lock timeout for a
// lock. Retryable once the session holding the lock is gone.
var ErrLockTimeout = migrate.ErrLockTimeout

// LockTimeoutError is the error behind ErrLockTimeout.
type LockTimeoutError = migrate.LockTimeoutError

// MigrateWith is Migrate with options.
func MigrateWith(ctx context.Context, pool *pgxpool.Pool, opts MigrateOptions) (Result, error) {
	s := set
	s.LockTimeout = opts.LockTimeout
	return migrate.Apply(ctx, pool, s, opts.Progress)
}
