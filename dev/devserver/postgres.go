package devserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/persistence"
	"go.temporal.io/server/common/persistence/serialization"
	pgplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	pgschema "go.temporal.io/server/schema/postgresql/v12"
	toolschema "go.temporal.io/server/tools/common/schema"
	sqltool "go.temporal.io/server/tools/sql"
)

// Postgres keeps the server's state in PostgreSQL: workflow state in one
// database, visibility in another, both on the server URL names.
type Postgres struct {
	// URL of the PostgreSQL server, postgres://user:password@host:port/db?params.
	// Its database (when left out, libpq's default: the user's name) is
	// only where the two databases below are created from when missing;
	// its query parameters (sslmode, …) are passed to every connection of
	// the server. Required.
	URL string
	// Database keeps workflow state (histories, mutable state, task
	// queues, cluster metadata and membership). Default "temporal".
	Database string
	// VisibilityDatabase keeps what workflows are listed and searched by.
	// Default "temporal_visibility".
	VisibilityDatabase string
	// HistoryShards is the number of history shards. It is fixed when
	// Database is first set up: Start fails, naming both counts, when the
	// database holds another. Default 4.
	HistoryShards int32
	// MaxConns is the most connections each Temporal service keeps to each
	// database (a process of all four services holds up to 8×MaxConns).
	// Default 4.
	MaxConns int
}

// Defaults of Postgres.
const (
	DefaultPostgresDatabase           = "temporal"
	DefaultPostgresVisibilityDatabase = "temporal_visibility"
	DefaultHistoryShards              = 4
	defaultPostgresMaxConns           = 4
)

// Data store names in the server's persistence config for PostgreSQL.
const (
	pgStore           = "postgres"
	pgVisibilityStore = "postgres-visibility"
)

// Embedded schema directories of the server (go.temporal.io/server/schema).
const (
	pgSchemaMain       = "postgresql/v12/temporal"
	pgSchemaVisibility = "postgresql/v12/visibility"
)

// withDefaults fills the defaults and validates.
func (p Postgres) withDefaults() (Postgres, error) {
	p.Database = cmp.Or(p.Database, DefaultPostgresDatabase)
	p.VisibilityDatabase = cmp.Or(p.VisibilityDatabase, DefaultPostgresVisibilityDatabase)
	p.HistoryShards = cmp.Or(p.HistoryShards, DefaultHistoryShards)
	p.MaxConns = cmp.Or(p.MaxConns, defaultPostgresMaxConns)
	switch {
	case p.URL == "":
		return p, errors.New("devserver: Postgres.URL is empty")
	case p.HistoryShards < 1:
		return p, fmt.Errorf("devserver: Postgres.HistoryShards is %d: want at least 1", p.HistoryShards)
	case p.MaxConns < 1:
		return p, fmt.Errorf("devserver: Postgres.MaxConns is %d: want at least 1", p.MaxConns)
	case p.Database == p.VisibilityDatabase:
		return p, fmt.Errorf("devserver: Postgres.Database and Postgres.VisibilityDatabase are both %q: give each its own", p.Database)
	}
	if _, err := p.sqlConfig(p.Database); err != nil {
		return p, err
	}
	return p, nil
}

// RedactedURL is URL without its password, for messages.
func (p Postgres) RedactedURL() string {
	u, err := url.Parse(p.URL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// sqlConfig is the server's connection config for database db.
func (p Postgres) sqlConfig(db string) (*config.SQL, error) {
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Hostname() == "" {
		// The parse error can quote the URL, password included.
		return nil, errors.New("devserver: Postgres.URL: want postgres://user:password@host:port/database")
	}
	port := cmp.Or(u.Port(), "5432")
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("devserver: Postgres.URL: port %q is not a number from 1 to 65535", port)
	}
	attrs := map[string]string{}
	for k, v := range u.Query() {
		attrs[k] = v[len(v)-1]
	}
	pass, _ := u.User.Password()
	return &config.SQL{
		PluginName:        pgplugin.PluginNamePGX,
		ConnectAddr:       net.JoinHostPort(u.Hostname(), port),
		ConnectProtocol:   "tcp",
		User:              u.User.Username(),
		Password:          pass,
		DatabaseName:      db,
		ConnectAttributes: attrs,
		MaxConns:          p.MaxConns,
		MaxIdleConns:      p.MaxConns,
	}, nil
}

// openPostgresStores creates the databases when missing, sets up or
// upgrades their schemas with the server's own schema files and tasks,
// and checks the shard count a set-up database holds.
func openPostgresStores(ctx context.Context, p Postgres, progress io.Writer) (stores, error) {
	main, err := p.sqlConfig(p.Database)
	if err != nil {
		return stores{}, err
	}
	vis, _ := p.sqlConfig(p.VisibilityDatabase)
	for _, s := range []struct {
		cfg             *config.SQL
		schema, version string
	}{{main, pgSchemaMain, pgschema.Version}, {vis, pgSchemaVisibility, pgschema.VisibilityVersion}} {
		if err := ensureDatabase(ctx, p, s.cfg.DatabaseName, progress); err != nil {
			return stores{}, err
		}
		if err := migrateSchema(s.cfg, s.schema, s.version, progress); err != nil {
			return stores{}, err
		}
	}
	have, err := shardCount(ctx, p)
	if err != nil {
		return stores{}, err
	}
	if have != 0 && have != p.HistoryShards {
		return stores{}, &ShardCountError{Database: p.Database, Want: p.HistoryShards, Have: have}
	}
	return stores{
		postgres:      true,
		main:          main,
		visibility:    vis,
		mainName:      pgStore,
		visName:       pgVisibilityStore,
		shards:        p.HistoryShards,
		restart:       have != 0,
		forgetMembers: func(ctx context.Context) (int, error) { return forgetDeadPostgresMembers(ctx, p) },
	}, nil
}

// ShardCountError is Start's error when the database was set up with
// another number of history shards than configured: the count decides
// which shard owns each workflow, so it can never change.
type ShardCountError struct {
	Database   string
	Want, Have int32
}

func (e *ShardCountError) Error() string {
	return fmt.Sprintf("devserver: Postgres.HistoryShards is %d, but database %q was set up with %d history shards; "+
		"the count is fixed when a database is set up: use %d, or new databases", e.Want, e.Database, e.Have, e.Have)
}

// connect opens one connection to database db on p's server.
func connect(ctx context.Context, p Postgres, db string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(p.URL)
	if err != nil {
		return nil, errors.New("devserver: Postgres.URL: want postgres://user:password@host:port/database")
	}
	if db != "" {
		cfg.Database = db
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("devserver: connect to PostgreSQL %s: %w", p.RedactedURL(), err)
	}
	return c, nil
}

// ensureDatabase creates database name when it is missing.
func ensureDatabase(ctx context.Context, p Postgres, name string, progress io.Writer) error {
	admin, err := connect(ctx, p, "")
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("devserver: look up database %q: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: another process was quicker
		return nil
	}
	if err != nil {
		return fmt.Errorf("devserver: create database %q: %w", name, err)
	}
	fmt.Fprintf(progress, "devserver: created database %q\n", name)
	return nil
}

// migrateSchema sets up the schema of the server's embedded schema
// directory dir in the database of cfg, or upgrades it, the way the
// server's temporal-sql-tool does (setup-schema -v 0.0, then
// update-schema): the version tables, then every versioned step above
// the database's version. Both tasks skip what is done, so a second run
// changes nothing.
func migrateSchema(cfg *config.SQL, dir, latest string, progress io.Writer) error {
	conn, err := sqltool.NewConnection(cfg, log.NewNoopLogger())
	if err != nil {
		return fmt.Errorf("devserver: connect to database %q: %w", cfg.DatabaseName, err)
	}
	defer conn.Close()
	if err := toolschema.NewSetupSchemaTask(conn, &toolschema.SetupConfig{InitialVersion: "0.0"}, log.NewNoopLogger()).Run(); err != nil {
		return fmt.Errorf("devserver: set up schema versioning in database %q: %w", cfg.DatabaseName, err)
	}
	before, err := conn.ReadSchemaVersion()
	if err != nil {
		return fmt.Errorf("devserver: read schema version of database %q: %w", cfg.DatabaseName, err)
	}
	if before == latest {
		fmt.Fprintf(progress, "devserver: database %q: schema %s is up to date\n", cfg.DatabaseName, dir)
		return nil
	}
	fmt.Fprintf(progress, "devserver: database %q: upgrading schema %s from %s to %s…\n", cfg.DatabaseName, dir, before, latest)
	if err := toolschema.NewUpdateSchemaTask(conn, &toolschema.UpdateConfig{DBName: cfg.DatabaseName, SchemaName: dir}, log.NewNoopLogger()).Run(); err != nil {
		return fmt.Errorf("devserver: upgrade schema of database %q: %w", cfg.DatabaseName, err)
	}
	after, err := conn.ReadSchemaVersion()
	if err != nil {
		return fmt.Errorf("devserver: read schema version of database %q: %w", cfg.DatabaseName, err)
	}
	fmt.Fprintf(progress, "devserver: database %q: schema %s at %s\n", cfg.DatabaseName, dir, after)
	return nil
}

// shardCount is the history shard count the database's cluster metadata
// holds, or 0 before the server's first start on it.
func shardCount(ctx context.Context, p Postgres) (int32, error) {
	c, err := connect(ctx, p, p.Database)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	var (
		data     []byte
		encoding string
	)
	err = c.QueryRow(ctx, `SELECT data, data_encoding FROM cluster_metadata_info WHERE metadata_partition = 0 AND cluster_name = $1`,
		clusterName).Scan(&data, &encoding)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("devserver: read cluster metadata in database %q: %w", p.Database, err)
	}
	md, err := serialization.NewSerializer().DeserializeClusterMetadata(persistence.NewDataBlob(data, encoding))
	if err != nil {
		return 0, fmt.Errorf("devserver: decode cluster metadata in database %q: %w", p.Database, err)
	}
	return md.HistoryShardCount, nil
}

// forgetDeadPostgresMembers is forgetDeadMembers on the database's
// cluster_membership table.
func forgetDeadPostgresMembers(ctx context.Context, p Postgres) (int, error) {
	c, err := connect(ctx, p, p.Database)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT DISTINCT rpc_address, rpc_port FROM cluster_membership`)
	if err != nil {
		return 0, fmt.Errorf("devserver: read cluster members in database %q: %w", p.Database, err)
	}
	type member struct {
		addr string
		port int16 // SMALLINT: membership ports stay below 32768 (see lowPort)
	}
	members, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (member, error) {
		var m member
		return m, r.Scan(&m.addr, &m.port)
	})
	if err != nil {
		return 0, fmt.Errorf("devserver: read cluster members in database %q: %w", p.Database, err)
	}
	deleted := 0
	for _, m := range members {
		if m.port <= 0 || listening(m.addr, int(m.port)) {
			continue
		}
		tag, err := c.Exec(ctx, `DELETE FROM cluster_membership WHERE rpc_address = $1 AND rpc_port = $2`, m.addr, m.port)
		if err != nil {
			return deleted, fmt.Errorf("devserver: forget cluster member %s:%d in database %q: %w", m.addr, m.port, p.Database, err)
		}
		deleted += int(tag.RowsAffected())
	}
	return deleted, nil
}
