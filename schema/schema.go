package schema

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var migrationName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q: name must look like 0001_name.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
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

const (
	// Serialises concurrent Migrate calls on the same schema; other schemas
	// (one per test) migrate in parallel. Transaction-scoped, so a crashed
	// migrator never leaves it held.
	sqlLock = `SELECT pg_advisory_xact_lock(hashtext('ferry.migrate:' || current_schema()))`

	sqlCreateVersions = `CREATE TABLE IF NOT EXISTS ferry_schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`

	sqlApplied = `SELECT version FROM ferry_schema_migrations`

	sqlRecord = `INSERT INTO ferry_schema_migrations (version, name) VALUES ($1, $2)`
)

// Result says what Migrate did.
type Result struct {
	// Applied lists the migrations this call applied, in order.
	Applied []Migration
	// Current is the schema version after the call.
	Current int
}

// Migrate applies every embedded migration that the database lacks, all in
// one transaction: either the schema moves to the newest version or nothing
// changes. progress, when not nil, is called before each migration runs.
func Migrate(ctx context.Context, pool *pgxpool.Pool, progress func(Migration)) (Result, error) {
	migrations, err := Migrations()
	if err != nil {
		return Result{}, err
	}
	var res Result
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlCreateVersions); err != nil {
			return fmt.Errorf("create ferry_schema_migrations: %w", err)
		}
		rows, err := tx.Query(ctx, sqlApplied)
		if err != nil {
			return fmt.Errorf("read applied versions: %w", err)
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return fmt.Errorf("read applied versions: %w", err)
		}
		for _, v := range applied {
			if int(v) > len(migrations) {
				return fmt.Errorf("database is at schema version %d, newer than this binary knows (%d): upgrade Ferry", v, len(migrations))
			}
			res.Current = max(res.Current, int(v))
		}
		for _, m := range migrations {
			if slices.Contains(applied, int32(m.Version)) {
				continue
			}
			if progress != nil {
				progress(m)
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("apply %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, sqlRecord, m.Version, m.Name); err != nil {
				return fmt.Errorf("record %04d_%s: %w", m.Version, m.Name, err)
			}
			res.Applied = append(res.Applied, m)
			res.Current = m.Version
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("migrate: %w", err)
	}
	return res, nil
}
