package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/ferry-outbox/ferry/outbox"
)

// sqlBusinessRow is the producer's own write: every transaction inserts
// one row of the bench table besides its outbox events, as a service would.
const sqlBusinessRow = `INSERT INTO bench_orders (aggregate_id, amount, note) VALUES ($1, $2, $3)`

// sqlBenchTable is created next to Ferry's tables in the bench schema.
const sqlBenchTable = `
CREATE TABLE IF NOT EXISTS bench_orders (
    id           bigserial   PRIMARY KEY,
    aggregate_id text        NOT NULL,
    amount       integer     NOT NULL,
    note         text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
)`

// benchEventType is the event type of every event the producer commits
// (the handoff probe's excepted): the consumer binds its routing keys
// alone (consumerBinding).
const benchEventType = "bench"

// producer commits business rows with outbox events through the outbox
// API, from several clients at once, and notes each event's commit time.
type producer struct {
	pool    *pgxpool.Pool
	writer  *outbox.Writer
	clients int
}

// commits is what a producer committed: event id → commit time.
type commits struct {
	mu           sync.Mutex
	at           map[string]time.Time
	first, last  time.Time
	transactions int
}

func newCommits() *commits { return &commits{at: map[string]time.Time{}} }

func (c *commits) add(ids []string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.at[id] = at
	}
	if c.first.IsZero() || at.Before(c.first) {
		c.first = at
	}
	if at.After(c.last) {
		c.last = at
	}
	c.transactions++
}

// firstCommit is the first commit's time; zero before it.
func (c *commits) firstCommit() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// since counts the events committed at or after t.
func (c *commits) since(t time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, at := range c.at {
		if !at.Before(t) {
			n++
		}
	}
	return n
}

func (c *commits) events() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}

// txJob is one transaction: a business row and n events of one aggregate.
type txJob struct {
	aggID string
	n     int
}

// payload returns a JSON document of about size bytes.
func payload(size int) []byte {
	return []byte(`{"pad":"` + strings.Repeat("x", max(0, size-10)) + `"}`)
}

// run commits the jobs from 'jobs' with p.clients concurrent transactions
// until the channel is closed, noting commits in c.
func (p *producer) run(ctx context.Context, aggType string, size int, jobs <-chan txJob, c *commits) error {
	body := payload(size)
	g, ctx := errgroup.WithContext(ctx)
	for range p.clients {
		g.Go(func() error {
			evs := make([]outbox.Event, 0, 16)
			for j := range jobs {
				evs = evs[:0]
				for range j.n {
					evs = append(evs, outbox.Event{AggregateType: aggType, AggregateID: j.aggID, EventType: benchEventType, Payload: body})
				}
				ids, err := p.commit(ctx, j.aggID, evs)
				if err != nil {
					return err
				}
				c.add(ids, time.Now())
			}
			return nil
		})
	}
	return g.Wait()
}

// commit runs one producer transaction: the business row, then the events.
func (p *producer) commit(ctx context.Context, aggID string, evs []outbox.Event) ([]string, error) {
	var ids []string
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlBusinessRow, aggID, 42, "bench"); err != nil {
			return fmt.Errorf("insert business row: %w", err)
		}
		if len(evs) == 0 {
			return nil
		}
		written, err := p.writer.WriteBatch(ctx, tx, evs)
		if err != nil {
			return fmt.Errorf("write outbox events: %w", err)
		}
		ids = make([]string, len(written))
		for i, w := range written {
			ids[i] = w.ID.String()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("producer transaction: %w", err)
	}
	return ids, nil
}

// commitTwoRows is the reference for what any second insert costs: the
// business row and a second row of the same table carrying the payload.
func (p *producer) commitTwoRows(ctx context.Context, aggID, body string) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlBusinessRow, aggID, 42, "bench"); err != nil {
			return fmt.Errorf("insert business row: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlBusinessRow, aggID, 43, body); err != nil {
			return fmt.Errorf("insert second row: %w", err)
		}
		return nil
	})
}

// produce commits a non-steady shape's transactions as fast as the clients
// go. Aggregates interleave: transaction i belongs to aggregate i mod the
// aggregate count.
func (p *producer) produce(ctx context.Context, s shape, aggType string, c *commits) error {
	jobs := make(chan txJob)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(jobs)
		for i := range s.txs {
			select {
			case jobs <- txJob{aggID: aggregateID(i % s.aggregates), n: s.eventsPerTx}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return p.run(ctx, aggType, s.payloadBytes, jobs, c)
}

// produceSteady commits one event per transaction at s.rate per second for
// d, on a fixed schedule (open loop): event i is due at i/rate. A producer
// that falls behind catches up as fast as it can; the achieved rate is in
// the commits.
func (p *producer) produceSteady(ctx context.Context, s shape, d time.Duration, aggType string, c *commits) error {
	jobs := make(chan txJob, p.clients)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	total := int(s.rate * d.Seconds())
	go func() {
		defer close(jobs)
		start := time.Now()
		for i := range total {
			due := start.Add(time.Duration(float64(i) / s.rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return
				}
			}
			select {
			case jobs <- txJob{aggID: aggregateID(i % s.aggregates), n: 1}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return p.run(ctx, aggType, s.payloadBytes, jobs, c)
}

func aggregateID(i int) string { return fmt.Sprintf("a%06d", i) }

// What each commitRate transaction writes besides its business row.
const (
	extraNone     = iota // the business row alone
	extraOutbox          // one outbox event through package outbox
	extraPlainRow        // a second business row carrying the event's payload
)

// commitRate runs transactions back to back on every client for d and
// returns the commits per second. extra says what each transaction writes
// besides its business row. Time up stops the clients between transactions,
// never inside one: a COMMIT cut off by a cancelled context may still land
// on the server after commitRate returned, and the caller's counts would
// then see half of a run.
func (p *producer) commitRate(ctx context.Context, d time.Duration, aggType string, extra int) (float64, error) {
	var n atomic.Int64
	body := payload(128)
	start := time.Now()
	deadline := start.Add(d)
	g, gctx := errgroup.WithContext(ctx)
	for client := range p.clients {
		g.Go(func() error {
			for i := 0; gctx.Err() == nil && time.Now().Before(deadline); i++ {
				agg := aggregateID(client*1_000_000 + i)
				var evs []outbox.Event
				if extra == extraOutbox {
					evs = []outbox.Event{{AggregateType: aggType, AggregateID: agg, EventType: benchEventType, Payload: body}}
				}
				var err error
				if extra == extraPlainRow {
					err = p.commitTwoRows(gctx, agg, string(body))
				} else {
					_, err = p.commit(gctx, agg, evs)
				}
				if err != nil {
					if ctx.Err() != nil {
						return nil // the caller gave up in the middle of a transaction
					}
					return err
				}
				n.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}
