package poller

import (
	"context"
	"fmt"
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

// Drain is the poller's claim pass: RunOnce until a batch comes back short
// (fewer than BatchSize rows). It returns the rows claimed and the first
// error, which ends the pass.
func (p *Poller) Drain(ctx context.Context) (total int, err error) {
	for {
		n, err := p.RunOnce(ctx)
		total += n
		if err != nil || n < p.cfg.BatchSize {
			return total, err
		}
	}
}
