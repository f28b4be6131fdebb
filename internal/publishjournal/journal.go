package publishjournal

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvVar turns the journal on (a true value, strconv.ParseBool's) in a
// build with the failpoints tag; it is read at the first publish.
const EnvVar = "FERRY_PUBLISH_JOURNAL"

// Table is the journal's table, in the publishing pool's schema.
const Table = "ferry_publish_journal"

// sqlCreateTable is the journal's table: one row per publish. bound is
// the latest end the lane's rules allow (see the package doc); ended_at
// is NULL while the publish runs, and for ever when its publisher died;
// outcome is "confirmed", the error, or NULL when the hook could not see
// it.
const sqlCreateTable = `CREATE TABLE ` + Table + ` (
    seq            bigserial   PRIMARY KEY,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    first_version  bigint      NOT NULL,
    last_version   bigint      NOT NULL,
    epoch          bigint      NOT NULL,
    party          text        NOT NULL,
    started_at     timestamptz NOT NULL,
    bound          timestamptz,
    ended_at       timestamptz,
    outcome        text)`

// CreateTable creates the journal's table in pool's schema: publishers
// that use pool journal from then on (in builds that have the journal).
func CreateTable(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, sqlCreateTable); err != nil {
		return fmt.Errorf("create %s: %w", Table, err)
	}
	return nil
}

// Record is one row of the journal.
type Record struct {
	AggregateType, AggregateID string
	// First and Last are the versions the publish sent (or tried to), in
	// order.
	First, Last int64
	Epoch       int64
	// Party is the publisher: "relay <name>" or "run <workflow id>/<run id>".
	Party   string
	Started time.Time
	// Bound is the latest end the lane allows; zero when unknown.
	Bound time.Time
	// Ended is when the publish returned; zero when it never did (its
	// publisher died, or the row could not be completed).
	Ended   time.Time
	Outcome string
}

// Read returns every row of the journal in pool's schema, oldest first.
func Read(ctx context.Context, pool *pgxpool.Pool) ([]Record, error) {
	rows, err := pool.Query(ctx, `SELECT aggregate_type, aggregate_id, first_version, last_version, epoch, party,
		started_at, bound, ended_at, coalesce(outcome, '') FROM `+Table+` ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", Table, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Record, error) {
		var rec Record
		var bound, ended *time.Time
		err := r.Scan(&rec.AggregateType, &rec.AggregateID, &rec.First, &rec.Last, &rec.Epoch, &rec.Party,
			&rec.Started, &bound, &ended, &rec.Outcome)
		if bound != nil {
			rec.Bound = *bound
		}
		if ended != nil {
			rec.Ended = *ended
		}
		return rec, err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", Table, err)
	}
	return out, nil
}
