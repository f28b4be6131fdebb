//go:build failpoints

package publishjournal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
)

// Enabled: this build has the journal (the failpoints build tag).
const Enabled = true

// on reads EnvVar once. A value that is no boolean panics, as a malformed
// FERRY_FAILPOINTS does: a typo must not turn a check into a check of
// nothing.
var on = sync.OnceValue(func() bool {
	v := os.Getenv(EnvVar)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		panic(fmt.Sprintf("publishjournal: %s=%q: want a boolean such as 1 or true", EnvVar, v))
	}
	return b
})

// absent holds the pools whose schema has no journal table: they are not
// asked again.
var absent sync.Map // *pgxpool.Pool → struct{}

// Entry is one publish's row, written by Relay or Run and finished by End.
// The zero Entry (journal off, no epoch) does nothing.
type Entry struct{ r *entry }

type entry struct {
	pool *pgxpool.Pool
	rec  Record
	seq  int64 // 0: the start could not be written; End writes the whole row
}

// Relay records the start of a relay's direct publish of versions first
// to last of an aggregate it owns under epoch; bound is the claim's time
// plus the lease. It returns once the row is written (or could not be).
func Relay(ctx context.Context, pool *pgxpool.Pool, relay, aggType, aggID string, first, last, epoch int64, bound time.Time) Entry {
	return begin(ctx, pool, Record{AggregateType: aggType, AggregateID: aggID, First: first, Last: last, Epoch: epoch,
		Party: "relay " + relay, Bound: bound})
}

// Run records the start of a workflow run's publish (ctx is its
// activity's) of versions first to last under epoch; nothing when epoch is
// 0 (the workflow lane: no owner). Its bound is the attempt's deadline.
func Run(ctx context.Context, pool *pgxpool.Pool, aggType, aggID string, first, last, epoch int64) Entry {
	if epoch == 0 || !on() {
		return Entry{}
	}
	party, bound := "run ?", time.Time{}
	if activity.IsActivity(ctx) {
		info := activity.GetInfo(ctx)
		party, bound = "run "+info.WorkflowExecution.ID+"/"+info.WorkflowExecution.RunID, info.Deadline
	}
	return begin(ctx, pool, Record{AggregateType: aggType, AggregateID: aggID, First: first, Last: last, Epoch: epoch,
		Party: party, Bound: bound})
}

// Statements. The start is written before the publish begins (so a
// publisher killed mid-publish leaves it), the end after it returned.
const (
	sqlStart = `INSERT INTO ` + Table + ` (aggregate_type, aggregate_id, first_version, last_version, epoch, party, started_at, bound)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq`
	sqlEnd = `UPDATE ` + Table + ` SET ended_at = $2, outcome = $3 WHERE seq = $1`
	sqlAll = `INSERT INTO ` + Table + ` (aggregate_type, aggregate_id, first_version, last_version, epoch, party, started_at, bound, ended_at, outcome)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`
)

func begin(ctx context.Context, pool *pgxpool.Pool, rec Record) Entry {
	if !on() || pool == nil {
		return Entry{}
	}
	if _, ok := absent.Load(pool); ok {
		return Entry{}
	}
	rec.Started = time.Now()
	e := &entry{pool: pool, rec: rec}
	// A short budget: the journal must not hold the publish back for
	// long (a PostgreSQL outage refuses connections at once).
	err := retry(ctx, 3, time.Second, func(ctx context.Context) error {
		return pool.QueryRow(ctx, sqlStart, rec.AggregateType, rec.AggregateID, rec.First, rec.Last, rec.Epoch, rec.Party,
			rec.Started, nullTime(rec.Bound)).Scan(&e.seq)
	})
	switch {
	case isUndefinedTable(err):
		absent.Store(pool, struct{}{})
		return Entry{}
	case err != nil:
		// End writes the whole row; a publisher that dies first leaves none.
		fmt.Fprintf(os.Stderr, "publishjournal: could not record the start of a publish of %s/%s v%d-%d (epoch %d, %s); End will try: %v\n",
			rec.AggregateType, rec.AggregateID, rec.First, rec.Last, rec.Epoch, rec.Party, err)
	}
	return Entry{r: e}
}

// End records that the publish returned, with its error when errp is set
// (nil: the hook could not see the outcome).
func (en Entry) End(errp *error) {
	e := en.r
	if e == nil {
		return
	}
	ended := time.Now()
	var outcome *string
	if errp != nil {
		s := "confirmed"
		if *errp != nil {
			s = (*errp).Error()
			if len(s) > 300 {
				s = s[:300]
			}
		}
		outcome = &s
	}
	// Detached: the publish's context may be the reason it returned.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := e.rec
	err := retry(ctx, 5, 2*time.Second, func(ctx context.Context) error {
		if e.seq == 0 {
			_, err := e.pool.Exec(ctx, sqlAll, r.AggregateType, r.AggregateID, r.First, r.Last, r.Epoch, r.Party,
				r.Started, nullTime(r.Bound), ended, outcome)
			return err
		}
		_, err := e.pool.Exec(ctx, sqlEnd, e.seq, ended, outcome)
		return err
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "publishjournal: could not record the end of a publish of %s/%s v%d-%d (epoch %d, %s): %v\n",
			r.AggregateType, r.AggregateID, r.First, r.Last, r.Epoch, r.Party, err)
	}
}

// retry runs f up to tries times, 200 ms apart, each bounded by each,
// while ctx lasts: a session the server terminated is replaced by the
// pool on the next try.
func retry(ctx context.Context, tries int, each time.Duration, f func(context.Context) error) error {
	var err error
	for try := range tries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
		tctx, cancel := context.WithTimeout(ctx, each)
		err = f(tctx)
		cancel()
		if err == nil || isUndefinedTable(err) {
			return err
		}
	}
	return err
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
