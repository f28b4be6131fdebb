package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
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
}

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
// migrate in parallel.
func Apply(ctx context.Context, pool *pgxpool.Pool, set Set, progress func(Migration)) (Result, error) {
	if !tableName.MatchString(set.Table) {
		return Result{}, fmt.Errorf("migrate: table name %q: must match %s", set.Table, tableName)
	}
	migrations, err := Load(set.FS, set.Dir)
	if err != nil {
		return Result{}, err
	}
	table := pgx.Identifier{set.Table}.Sanitize()
	var res Result
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1 || current_schema()))`, set.Lock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return fmt.Errorf("create %s: %w", set.Table, err)
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
			if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
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
