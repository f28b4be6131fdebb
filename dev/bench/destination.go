package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/destination"
)

// The burst-start workloads route every event to a start workflow
// destination: Ferry starts destWorkflowName on the run's own task queue
// (destQueue) for each event, and a worker in the bench process runs it;
// it takes the envelope and completes at once, the least a user's
// workflow can be.
const (
	destWorkflowName = "ferry-bench.Done"
	// destName is the route's name: workflow IDs are "bench/<event id>".
	destName = "bench"
	// destPollers are the bench worker's workflow task pollers, as the
	// ceiling's.
	destPollers = ceilingPollers
	// marksEvery is how often a destination run counts the rows marked
	// published, for its progress and for telling when it is done.
	marksEvery = 100 * time.Millisecond
)

// destQueue is run seq's task queue of the destination's workflows: the
// run's own, as Ferry's is, so no worker of an earlier run takes its
// tasks and no started workflow of it waits for a later run's worker.
func destQueue(seq int) string { return fmt.Sprintf("ferry-bench-dest-%d", seq) }

// destinationRoute is the --destination of a burst-start run: every event
// of aggType (the producer's event type is "bench") starts
// destWorkflowName on queue.
func destinationRoute(aggType, queue string) string {
	return fmt.Sprintf("%s.bench=start:%s,type=%s,queue=%s", aggType, destName, destWorkflowName, queue)
}

// destinationEnv is what a Ferry process of run seq needs for shape s
// beyond ferryEnv: the route of a destination workload, and no broker for
// its no-broker variant.
func destinationEnv(s shape, aggType string, seq int) []string {
	if !s.destination {
		return nil
	}
	env := []string{"FERRY_DESTINATIONS=" + destinationRoute(aggType, destQueue(seq))}
	if s.noBroker {
		env = append(env, "FERRY_NO_BROKER=true")
	}
	return env
}

// destWorker is the bench's worker for the destination's workflows of one
// run, and their completion count.
type destWorker struct {
	w    worker.Worker
	done atomic.Int64
}

// run is the destination's workflow: it takes the event and completes.
// The count is outside the workflow's state and kept off replays, as the
// ceiling's; a start whose input lost the event is not counted.
func (d *destWorker) run(ctx workflow.Context, ev destination.Envelope) error {
	if !workflow.IsReplaying(ctx) && ev.EventID != "" {
		d.done.Add(1)
	}
	return nil
}

// startDestWorker starts a worker for destWorkflowName on queue.
func startDestWorker(tc client.Client, queue string) (*destWorker, error) {
	d := &destWorker{}
	d.w = worker.New(tc, queue, worker.Options{MaxConcurrentWorkflowTaskPollers: destPollers})
	d.w.RegisterWorkflowWithOptions(d.run, workflow.RegisterOptions{Name: destWorkflowName})
	if err := d.w.Start(); err != nil {
		return nil, fmt.Errorf("start the destination's worker on %s: %w", queue, err)
	}
	return d, nil
}

// wait waits until want workflows completed, or nothing completed for
// stall, and returns how many did.
func (d *destWorker) wait(ctx context.Context, want int, stall time.Duration) int {
	last, lastChange := d.done.Load(), time.Now()
	for int(last) < want && time.Since(lastChange) < stall && sleepCtx(ctx, 50*time.Millisecond) {
		if n := d.done.Load(); n != last {
			last, lastChange = n, time.Now()
		}
	}
	return int(d.done.Load())
}

func (d *destWorker) stop() { d.w.Stop() }

// markWatch counts the rows marked published while a destination run
// goes: what the run's progress and its end go by. The outbox is emptied
// before every run, so every published row is the run's.
type markWatch struct {
	n    atomic.Int64
	done chan struct{}
}

const sqlCountMarked = `SELECT count(*) FROM outbox_events WHERE status = 'published'`

// watchMarks counts the marked rows every marksEvery until ctx ends.
func watchMarks(ctx context.Context, pool *pgxpool.Pool) *markWatch {
	m := &markWatch{done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for sleepCtx(ctx, marksEvery) {
			var n int64
			if err := pool.QueryRow(ctx, sqlCountMarked).Scan(&n); err == nil {
				m.n.Store(n)
			}
		}
	}()
	return m
}

func (m *markWatch) count() int { return int(m.n.Load()) }

// markedRow is one row marked published: the event and when.
type markedRow struct {
	id, aggID string
	version   int64
	at        time.Time
}

// sqlMarked reads every row marked published with its mark time.
// published_at is the time of the marking statement: Ferry marks in a
// statement of its own, the plain relay with statement_timestamp() after
// its publish (sqlRelayMarkEvents), both after the delivery succeeded.
const sqlMarked = `
SELECT id::text, aggregate_id, aggregate_version, published_at
FROM outbox_events WHERE status = 'published'`

// readMarks reads the rows marked published.
func readMarks(ctx context.Context, pool *pgxpool.Pool) ([]markedRow, error) {
	rows, err := pool.Query(ctx, sqlMarked)
	if err != nil {
		return nil, fmt.Errorf("read the rows marked published: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (markedRow, error) {
		var m markedRow
		err := row.Scan(&m.id, &m.aggID, &m.version, &m.at)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the rows marked published: %w", err)
	}
	return out, nil
}

// addMarks hands the marked rows to t as receipts of aggType, in mark
// order. Rows of one statement share its time and are taken in version
// order; a version marked strictly before a lower one of its aggregate is
// out of order, as a late receipt is.
func addMarks(t *Tally, aggType string, rows []markedRow) {
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b markedRow) int {
		return cmp.Or(a.at.Compare(b.at), strings.Compare(a.aggID, b.aggID), cmp.Compare(a.version, b.version))
	})
	for _, m := range rows {
		t.Add(Receipt{ID: m.id, AggregateType: aggType, AggregateID: m.aggID, Version: m.version, At: m.at})
	}
}
