package workflows

import (
	"encoding/json"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Effects: the aggregate workflow's side of external side effects (package
// effects holds the effect workflows themselves). After an event is
// published, the aggregate starts one child workflow per effect that the
// worker's routes attach to the event's type. The child's ID is a pure
// function of the event id and the effect name, so a re-signalled, retried,
// repaired, replayed or reset event never starts a second one: the server
// refuses the duplicate ID and the aggregate counts that as success.

// EffectsChangeID is the workflow.GetVersion change id behind which the
// aggregate workflow starts effect workflows; histories recorded before it
// replay without starting any.
const EffectsChangeID = "ferry-effects"

// EffectStart is one effect to start for a published event, as the
// worker's routes resolve it (PublishResult.Effects).
type EffectStart struct {
	// Effect is the effect's name, "<kind>" or "<kind>:<argument>", such as
	// "charge" or "email:confirmation". It is part of the workflow ID and
	// of every idempotency key the effect derives.
	Effect string `json:"effect"`
	// WorkflowType is the effect workflow's registered name.
	WorkflowType string `json:"workflow_type"`
	// TaskQueue of the effect workflow; empty: the aggregate's.
	TaskQueue string `json:"task_queue,omitempty"`
	// Params are the effect kind's own settings, opaque to the aggregate.
	Params json.RawMessage `json:"params,omitempty"`
}

// EffectInput is every effect workflow's input: a reference to the event,
// never its payload (activities read it from PostgreSQL).
type EffectInput struct {
	Effect           string          `json:"effect"`
	EventID          string          `json:"event_id"`
	EventType        string          `json:"event_type"`
	AggregateType    string          `json:"aggregate_type"`
	AggregateID      string          `json:"aggregate_id"`
	AggregateVersion int64           `json:"aggregate_version"`
	Params           json.RawMessage `json:"params,omitempty"`
}

// EffectWorkflowID is the effect workflow's ID for an event: one per event
// and effect, never derived from a run id.
func EffectWorkflowID(effect, eventID string) string {
	return "ferry-effect/" + effect + "/" + eventID
}

// EffectCounts is what the aggregate's State says about effect starts.
type EffectCounts struct {
	// Started effect workflows.
	Started int `json:"started"`
	// AlreadyStarted: starts the server refused because the effect
	// workflow's ID existed (a repeat of an event already handled).
	AlreadyStarted int `json:"already_started"`
	// Failed starts for any other reason (logged at error level).
	Failed int `json:"failed"`
}

// startEffects starts the effect workflows of a published event and waits
// until each has started (or was there already), so none is left pending
// when the aggregate continues-as-new or completes. ABANDON lets the
// effects outlive the aggregate's run; REJECT_DUPLICATE keeps a completed
// effect from running again for as long as the namespace retains it.
func (s *aggregateState) startEffects(ctx workflow.Context, ev EventRef, effects []EffectStart) {
	if len(effects) == 0 {
		return
	}
	// Revision1 runs always start effects; older ones decide by the marker
	// their history has (or lacks).
	if s.in.Revision < Revision1 && workflow.GetVersion(ctx, EffectsChangeID, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	futures := make([]workflow.ChildWorkflowFuture, len(effects))
	for i, e := range effects {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:            EffectWorkflowID(e.Effect, ev.ID),
			TaskQueue:             e.TaskQueue,
			ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
			Memo: map[string]any{
				"ferry.event_id":  ev.ID,
				"ferry.aggregate": s.in.AggregateType + "/" + s.in.AggregateID,
			},
		})
		futures[i] = workflow.ExecuteChildWorkflow(cctx, e.WorkflowType, EffectInput{
			Effect:           e.Effect,
			EventID:          ev.ID,
			EventType:        ev.Type,
			AggregateType:    s.in.AggregateType,
			AggregateID:      s.in.AggregateID,
			AggregateVersion: ev.Version,
			Params:           e.Params,
		})
	}
	for i, f := range futures {
		err := f.GetChildWorkflowExecution().Get(ctx, nil)
		switch {
		case err == nil:
			s.effects.Started++
		case temporal.IsWorkflowExecutionAlreadyStartedError(err):
			s.effects.AlreadyStarted++
		default:
			s.effects.Failed++
			workflow.GetLogger(ctx).Error("effect workflow not started", "event_id", ev.ID,
				"effect", effects[i].Effect, "workflow_type", effects[i].WorkflowType, "error", err)
		}
	}
}
