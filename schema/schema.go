package schema

import (
	"context"
	"embed"

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
// Concurrent calls on one schema serialise on an advisory lock.
func Migrate(ctx context.Context, pool *pgxpool.Pool, progress func(Migration)) (Result, error) {
	return migrate.Apply(ctx, pool, set, progress)
}
