package inbox

import (
	"context"
	"embed"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-outbox/ferry/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one numbered SQL file of the inbox.
type Migration = migrate.Migration

// MigrateResult says what Migrate did.
type MigrateResult = migrate.Result

// The inbox records its versions apart from the outbox's
// (ferry_schema_migrations) and locks apart from it, so both can be applied
// to one schema in any order.
var migrations = migrate.Set{
	FS:      migrationFiles,
	Dir:     "migrations",
	Table:   "ferry_inbox_migrations",
	Lock:    "ferry.inbox.migrate:",
	Product: "the consumer",
}

// Migrations returns the inbox's embedded migrations in version order.
func Migrations() ([]Migration, error) {
	return migrate.Load(migrations.FS, migrations.Dir)
}

// Migrate creates or upgrades the inbox tables in the pool's current schema.
// It is idempotent and safe to run from several processes at once.
// progress, when not nil, is called before each migration runs.
func Migrate(ctx context.Context, pool *pgxpool.Pool, progress func(Migration)) (MigrateResult, error) {
	return migrate.Apply(ctx, pool, migrations, progress)
}
