package walrelay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// streamedColumns are the columns the publication Ferry creates carries (a
// column list, PostgreSQL 15+): the payload, the bulk of a row, stays out of
// the stream. deliver_after (migration 0009) tells a delayed row, which is
// left to the claim pass, from one to stream.
var streamedColumns = []string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "event_type", "trace_parent", "trace_state", "status", "deliver_after"}

// streamedColumnsBefore0009 is the column list of publications Ferry created
// before delayed events; Start adds deliver_after to such a publication.
var streamedColumnsBefore0009 = streamedColumns[:len(streamedColumns)-1]

// sqlPublishedColumns reads the columns the publication streams of this
// schema's outbox_events (every column when it has no column list).
const sqlPublishedColumns = `
SELECT attnames FROM pg_publication_tables
WHERE pubname = $1 AND schemaname = current_schema() AND tablename = 'outbox_events'`

// sqlRole: REPLICATION (or superuser) is what a replication connection
// and a slot need.
const sqlRole = `SELECT current_user, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user`

// sqlPublication reads whether the publication exists, publishes inserts,
// and includes this schema's outbox_events (directly, FOR ALL TABLES or
// FOR TABLES IN SCHEMA).
const sqlPublication = `
SELECT p.pubinsert,
       EXISTS (SELECT 1 FROM pg_publication_tables t
               WHERE t.pubname = p.pubname AND t.schemaname = current_schema() AND t.tablename = 'outbox_events')
FROM pg_publication p WHERE p.pubname = $1`

// sqlSlot reads an existing slot's kind, so one made for something else is
// never streamed from.
const sqlSlot = `
SELECT slot_type, coalesce(plugin, ''), coalesce(database, ''), current_database()
FROM pg_replication_slots WHERE slot_name = $1`

// sqlCreateSlot: through SQL rather than the replication protocol, so the
// name is a bound parameter. It waits for the transactions running at that
// moment to end (the slot's consistent point): rows they commit are caught
// up by the claim pass, not streamed.
const sqlCreateSlot = `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`

// sqlSlotStats: WAL the slot keeps on disk (from restart_lsn) and WAL
// written since the relay last confirmed (confirmed_flush_lsn).
const sqlSlotStats = `
SELECT active, coalesce(active_pid, 0),
       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint,
       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint
FROM pg_replication_slots WHERE slot_name = $1`

// prepare checks what log tailing needs and creates the publication and
// the slot when they are missing. created reports a new slot: rows
// committed before it are not in its stream.
func prepare(ctx context.Context, pool *pgxpool.Pool, slot, publication string) (created bool, err error) {
	var walLevel string
	if err := pool.QueryRow(ctx, `SHOW wal_level`).Scan(&walLevel); err != nil {
		return false, fmt.Errorf("read wal_level: %w", err)
	}
	if walLevel != "logical" {
		return false, fmt.Errorf("%w: it is %q\n  Log tailing reads PostgreSQL's write-ahead log: set wal_level = logical (ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL), or set Config.Source to poll",
			ErrWALLevel, walLevel)
	}
	var user string
	var mayReplicate bool
	if err := pool.QueryRow(ctx, sqlRole).Scan(&user, &mayReplicate); err != nil {
		return false, fmt.Errorf("read the role's attributes: %w", err)
	}
	if !mayReplicate {
		return false, fmt.Errorf("%w: role %q lacks the REPLICATION attribute\n  Grant it (ALTER ROLE %s REPLICATION), or set Config.Source to poll",
			ErrNoReplicationPrivilege, user, pgx.Identifier{user}.Sanitize())
	}
	if err := ensurePublication(ctx, pool, publication); err != nil {
		return false, err
	}
	return ensureSlot(ctx, pool, slot)
}

func ensurePublication(ctx context.Context, pool *pgxpool.Pool, publication string) error {
	var inserts, hasTable bool
	err := pool.QueryRow(ctx, sqlPublication, publication).Scan(&inserts, &hasTable)
	if errors.Is(err, pgx.ErrNoRows) {
		var schemaName string
		if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schemaName); err != nil {
			return fmt.Errorf("read the current schema: %w", err)
		}
		// Inserts only: the relay's own status updates stay out of the stream.
		_, err = pool.Exec(ctx, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')`,
			pgx.Identifier{publication}.Sanitize(), outboxTable(schemaName)))
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.Code == codeUndefinedColumn {
			return fmt.Errorf("create publication %q: %w (run `ferry migrate`)", publication, err)
		}
		// Another relay creating it at the same moment: 42710 once its
		// transaction has committed, 23505 on the catalog's unique index
		// while it was still open.
		raced := errors.As(err, &pg) && (pg.Code == codeDuplicateObject || pg.Code == codeUniqueViolation)
		if err != nil && !raced {
			return fmt.Errorf("create publication %q: %w", publication, err)
		}
		if err == nil {
			return nil
		}
		// Another relay created it meanwhile: check it as any other.
		err = pool.QueryRow(ctx, sqlPublication, publication).Scan(&inserts, &hasTable)
	}
	if err != nil {
		return fmt.Errorf("read publication %q: %w", publication, err)
	}
	if !hasTable || !inserts {
		return fmt.Errorf("%w: publication %q exists but does not publish inserts into outbox_events of this schema\n  Add it (ALTER PUBLICATION %s ADD TABLE outbox_events; and publish = 'insert'), drop the publication so Ferry creates its own, or set Config.WALPublication to another name",
			ErrPublicationMissingTable, publication, pgx.Identifier{publication}.Sanitize())
	}
	return upgradePublication(ctx, pool, publication)
}

// outboxTable is this schema's outbox_events with the streamed column list.
func outboxTable(schemaName string) string {
	cols := make([]string, len(streamedColumns))
	for i, c := range streamedColumns {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	return pgx.Identifier{schemaName, "outbox_events"}.Sanitize() + " (" + strings.Join(cols, ", ") + ")"
}

// upgradePublication adds deliver_after to a publication Ferry created
// before delayed events (exactly the old column list), so the stream tells
// delayed rows without a query. One transaction: the stream sees the old
// list up to its commit, the new one after it. Any other publication is
// left alone (the relay then asks the database, see dropDelayed).
func upgradePublication(ctx context.Context, pool *pgxpool.Pool, publication string) error {
	var cols []string
	if err := pool.QueryRow(ctx, sqlPublishedColumns, publication).Scan(&cols); err != nil {
		return fmt.Errorf("read the columns of publication %q: %w", publication, err)
	}
	slices.Sort(cols)
	old := slices.Sorted(slices.Values(streamedColumnsBefore0009))
	if !slices.Equal(cols, old) {
		return nil
	}
	var schemaName string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schemaName); err != nil {
		return fmt.Errorf("read the current schema: %w", err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		pub := pgx.Identifier{publication}.Sanitize()
		if _, err := tx.Exec(ctx, `ALTER PUBLICATION `+pub+` DROP TABLE `+pgx.Identifier{schemaName, "outbox_events"}.Sanitize()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `ALTER PUBLICATION `+pub+` ADD TABLE `+outboxTable(schemaName))
		return err
	})
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == codeUndefinedColumn {
		return fmt.Errorf("add deliver_after to publication %q: %w (run `ferry migrate`)", publication, err)
	}
	if err != nil {
		return fmt.Errorf("add deliver_after to publication %q: %w", publication, err)
	}
	return nil
}

func ensureSlot(ctx context.Context, pool *pgxpool.Pool, slot string) (created bool, err error) {
	var kind, plugin, db, here string
	err = pool.QueryRow(ctx, sqlSlot, slot).Scan(&kind, &plugin, &db, &here)
	switch {
	case err == nil:
		if kind != "logical" || plugin != "pgoutput" || db != here {
			return false, fmt.Errorf("replication slot %q exists but is a %s slot of plugin %q in database %q, not a pgoutput slot of %q: set Config.WALSlot to another name",
				slot, kind, plugin, db, here)
		}
		return false, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("read replication slot %q: %w", slot, err)
	}
	var lsn string
	err = pool.QueryRow(ctx, sqlCreateSlot, slot).Scan(&lsn)
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == codeDuplicateObject {
		return false, nil // another relay created it meanwhile
	}
	if err != nil && ctx.Err() != nil {
		return false, fmt.Errorf("create replication slot %q: it waits for every transaction open in the database to end (a slot starts at a consistent point), and one stayed open: %w",
			slot, err)
	}
	if err != nil {
		var maxSlots string
		_ = pool.QueryRow(ctx, `SHOW max_replication_slots`).Scan(&maxSlots)
		return false, translateCreateSlot(slot, maxSlots, err)
	}
	return true, nil
}

// SlotStats is one look at the relay's replication slot.
type SlotStats struct {
	// Exists is false when the slot is gone; the rest is then zero.
	Exists bool
	// Active: a relay streams from it now (ActivePID is its walsender).
	Active    bool
	ActivePID int
	// RetainedBytes is WAL PostgreSQL keeps for the slot (from its
	// restart_lsn to the current WAL position): disk a stalled relay pins.
	RetainedBytes int64
	// LagBytes is WAL written since the relay last confirmed
	// (confirmed_flush_lsn).
	LagBytes int64
}

// ReadSlotStats reads the slot's state from pg_replication_slots.
func ReadSlotStats(ctx context.Context, pool *pgxpool.Pool, slot string) (SlotStats, error) {
	var s SlotStats
	err := pool.QueryRow(ctx, sqlSlotStats, slot).Scan(&s.Active, &s.ActivePID, &s.RetainedBytes, &s.LagBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return SlotStats{}, nil
	}
	if err != nil {
		return SlotStats{}, fmt.Errorf("read replication slot %q: %w", slot, err)
	}
	s.Exists = true
	return s, nil
}

// DropSlot drops the slot and the publication (each if it exists), for a
// team going back to polling: a slot nobody reads pins WAL forever. It
// refuses while a relay streams from the slot. It reports what it dropped.
func DropSlot(ctx context.Context, pool *pgxpool.Pool, slot, publication string) (droppedSlot, droppedPublication bool, err error) {
	if err := (Config{Slot: slot, Publication: publication}).Validate(); err != nil {
		return false, false, err
	}
	s, err := ReadSlotStats(ctx, pool, slot)
	if err != nil {
		return false, false, err
	}
	if s.Active {
		return false, false, fmt.Errorf("%w: slot %q is streamed by PID %d: stop the WAL relays (ferry poller --source wal) first",
			ErrSlotInUse, slot, s.ActivePID)
	}
	if s.Exists {
		if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
			return false, false, fmt.Errorf("drop replication slot %q: %w", slot, translateStart(slot, err))
		}
		droppedSlot = true
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, publication).Scan(&exists); err != nil {
		return droppedSlot, false, fmt.Errorf("read publication %q: %w", publication, err)
	}
	if !exists {
		return droppedSlot, false, nil
	}
	if _, err := pool.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{publication}.Sanitize()); err != nil {
		return droppedSlot, false, fmt.Errorf("drop publication %q: %w", publication, err)
	}
	return droppedSlot, true, nil
}
