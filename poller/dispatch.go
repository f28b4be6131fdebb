package poller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/workflows"
)

// Event is one outbox row handed to its aggregate's workflow by a relay
// that found it some other way than a claim (package walrelay reads it from
// PostgreSQL's write-ahead log).
type Event struct {
	ID, AggregateType, AggregateID, EventType string
	Version                                   int64
	// TraceParent and TraceState are the W3C trace context stored with the
	// row; may be empty.
	TraceParent, TraceState string
}

// Failure is one aggregate whose events Temporal did not accept.
type Failure struct {
	WorkflowID string
	// IDs are the event ids of the aggregate's events in the dispatch.
	IDs []string
	Err error
}

// Dispatch hands events to their aggregates' workflows with the code that
// RunOnce uses for a claimed batch: grouped per aggregate, versions
// ascending, Concurrency aggregates at a time, a one-shot start for an
// aggregate this poller has not dispatched within SignalWindow and
// Signal-With-Start otherwise, one ferry.dispatch span per aggregate. It
// claims and marks nothing: accepted are the ids Temporal accepted (mark
// them with MarkDispatched), failed the aggregates it did not. Safe to call
// while the poller runs or RunOnce is in progress.
func (p *Poller) Dispatch(ctx context.Context, events []Event) (accepted []string, failed []Failure) {
	if len(events) == 0 {
		return nil, nil
	}
	batch := make([]claimed, len(events))
	for i, e := range events {
		batch[i] = claimed{id: e.ID, aggType: e.AggregateType, aggID: e.AggregateID, eventType: e.EventType,
			version: e.Version, traceParent: e.TraceParent, traceState: e.TraceState}
	}
	ok, fs := p.dispatch(ctx, group(batch))
	for _, f := range fs {
		failed = append(failed, Failure{WorkflowID: f.workflowID, IDs: f.ids, Err: f.err})
	}
	return ok, failed
}

// MarkDispatched marks pending rows dispatched, the statement RunOnce runs
// once Temporal accepted their signals (a row already published stays
// published), bounded by MarkTimeout.
func (p *Poller) MarkDispatched(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.MarkTimeout)
	defer cancel()
	if _, err := p.cfg.Pool.Exec(ctx, sqlMarkDispatched, ids); err != nil {
		return fmt.Errorf("mark %d rows dispatched: %w", len(ids), err)
	}
	return nil
}

// Drain is the poller's claim pass: rounds of the configured lane (RunOnce
// in the workflow lane; overlapping direct batches in the publish-first
// lane, drainDirect) until one comes back short. It returns the rows
// claimed and the first error, which ends the pass.
func (p *Poller) Drain(ctx context.Context) (total int, err error) {
	if p.cfg.Lane == LanePublishFirst {
		return p.drainDirect(ctx)
	}
	for {
		n, again, err := p.round(ctx)
		total += n
		if err != nil || !again {
			return total, err
		}
	}
}

// RelayAggregates is the publish-first lane's round for the given
// aggregates, as the log-tailing relay hands them over from its stream:
// their next events are published directly when nothing else holds them
// (those of aggregates workflows own are ServeOwned's, which it wakes); what this leaves (an
// aggregate another relay is publishing, a version not due yet) is the
// claim pass's. It returns the rows it took.
func (p *Poller) RelayAggregates(ctx context.Context, keys []relaydb.AggregateKey) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	n, _, err := p.directRound(ctx, keys)
	p.pokeOwned() // streamed rows of aggregates workflows own: ServeOwned's
	return n, err
}

// Lane is the lane this poller runs (Config.Lane).
func (p *Poller) Lane() string { return p.cfg.Lane }

type aggregateGroup struct {
	aggType, aggID string
	events         []workflows.EventRef
	ids            []string
	rows           []claimed // for the dispatch span's parent and links
	// epoch: the workflow owns the aggregate under it (the publish-first
	// lane); 0 in the workflow lane.
	epoch int64
	// handoff: the lane hands the aggregate over now (cause says why): a
	// run is started with the events in its input, signalled only when
	// one is open.
	handoff bool
	cause   string
}

// group splits a batch per aggregate, versions ascending, aggregates in the
// order they first appear (oldest first).
func group(batch []claimed) []*aggregateGroup {
	byKey := map[string]*aggregateGroup{}
	var out []*aggregateGroup
	for _, c := range batch {
		key := c.aggType + "\x00" + c.aggID
		g := byKey[key]
		if g == nil {
			g = &aggregateGroup{aggType: c.aggType, aggID: c.aggID}
			byKey[key] = g
			out = append(out, g)
		}
		g.events = append(g.events, workflows.EventRef{ID: c.id, Version: c.version, Type: c.eventType})
		g.ids = append(g.ids, c.id)
		g.rows = append(g.rows, c)
	}
	for _, g := range out {
		slices.SortFunc(g.events, func(a, b workflows.EventRef) int { return cmp.Compare(a.Version, b.Version) })
	}
	return out
}

type failure struct {
	workflowID string
	ids        []string
	rows       []claimed
	err        error
}

// dispatch signals every group, Concurrency at a time. One aggregate's
// failure never stops the others.
func (p *Poller) dispatch(ctx context.Context, groups []*aggregateGroup) (ok []string, failed []failure) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, p.cfg.Concurrency)
	)
	for _, g := range groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := p.signal(ctx, g)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, failure{workflowID: workflows.WorkflowID(g.aggType, g.aggID), ids: g.ids, rows: g.rows, err: err})
				return
			}
			ok = append(ok, g.ids...)
		}()
	}
	wg.Wait()
	return ok, failed
}
