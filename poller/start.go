package poller

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/workflows"
)

// signal hands a group's events to its aggregate's workflow: a one-shot
// start for an aggregate not dispatched recently (falling back to
// Signal-With-Start when a run is open after all), Signal-With-Start
// otherwise. Either way the workflow orders the events and drops repeats.
func (p *Poller) signal(ctx context.Context, g *aggregateGroup) (err error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.SignalTimeout)
	defer cancel()
	id := workflows.WorkflowID(g.aggType, g.aggID)
	ctx, span := p.dispatchSpan(ctx, g, id)
	defer func() { endSpan(span, err) }()
	// The run's settings are its worker's (workflows.Revision2).
	in := workflows.AggregateInput{
		AggregateType: g.aggType,
		AggregateID:   g.aggID,
		Revision:      workflows.CurrentRevision,
	}
	if g.epoch > 0 {
		// The publish-first lane: the workflow owns the aggregate, handed
		// over for a reason (a failed publish, an event that needs it, a
		// repair): a run that starts goes to the regular path first.
		in.Revision, in.Epoch = workflows.LaneRevision, g.epoch
		in.Handoff, in.HandoffCause = true, g.cause
	}
	parts := chunks(g.events, maxRefsPerDispatch)
	how := DispatchSignal
	switch {
	case g.handoff:
		started, err := p.startOneShot(ctx, id, parts[0], in)
		if err != nil {
			return err
		}
		if started {
			parts = parts[1:]
			how = DispatchHandoff
		} else {
			// A run is open (one that released the aggregate and is
			// completing, or one of before the lane): the signal's epoch
			// makes it the owner.
			how = DispatchHandoffSignal
		}
	case g.epoch == 0 && p.cfg.StartMode == StartOneShot && !p.recent.seen(id, time.Now()):
		started, err := p.startOneShot(ctx, id, parts[0], in)
		if err != nil {
			return err
		}
		if started {
			parts = parts[1:]
			how = DispatchStart
		} else {
			how = DispatchStartFallback
		}
	}
	// The rest (all of it, unless a one-shot run started) by signal, in
	// version order: the run started above, or an open one, takes them.
	for _, part := range parts {
		_, err = p.cfg.Temporal.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal,
			workflows.EventsSignalArg{Events: part, Epoch: g.epoch, Handoff: g.handoff},
			client.StartWorkflowOptions{ID: id, TaskQueue: p.cfg.TaskQueue},
			workflows.AggregateWorkflowName, in)
		if err != nil {
			return fmt.Errorf("signal-with-start %s: %w", id, err)
		}
	}
	p.metrics.Dispatched(how)
	return nil
}

// maxRefsPerDispatch bounds the event references in one start's input or
// one signal: about 100 bytes each, so a dispatch stays far below
// Temporal's 2 MB payload limit whatever the claim size (up to 5 ×
// BatchSize rows of one aggregate).
const maxRefsPerDispatch = 1000

// chunks splits events, in order, into slices of at most n.
func chunks(events []workflows.EventRef, n int) [][]workflows.EventRef {
	out := make([][]workflows.EventRef, 0, (len(events)+n-1)/n)
	for len(events) > n {
		out = append(out, events[:n])
		events = events[n:]
	}
	return append(out, events)
}

// startOneShot starts a one-shot run with the group's events in its input.
// It reports false, without an error, when a run of the aggregate is open:
// the caller signals that one instead. Eager: when a worker of the task
// queue shares the client (as in `ferry run`), the server hands it the
// first workflow task in the start's reply, skipping the task queue and a
// state transition; otherwise the start is an ordinary one.
func (p *Poller) startOneShot(ctx context.Context, id string, events []workflows.EventRef, in workflows.AggregateInput) (bool, error) {
	in.OneShot = true
	in.Pending = events
	_, err := p.cfg.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:               id,
		TaskQueue:        p.cfg.TaskQueue,
		EnableEagerStart: true,
		// The default would hand back the open run as if started.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, workflows.AggregateWorkflowName, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &already):
		return false, nil
	default:
		return false, fmt.Errorf("start %s: %w", id, err)
	}
}
