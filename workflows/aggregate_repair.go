package workflows

import (
	"cmp"
	"errors"
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/outbox"
)

// Repairs of a blocked aggregate: by update (validated before it is
// accepted) or by signal (rejected ones are listed in the state, the memo
// and a metric), applied once per request id.

// validate accepts a repair request only for the blocked event, with an
// actor, a reason and (for patch) a payload that would be accepted as a new
// event. A request id seen before is always accepted: it answers with the
// earlier result.
//
// byClass turns on repairs by error class: a request without an event id
// then means "whatever is blocked here", and ExpectErrorClass, when set,
// must be the blocked event's class. Off, a request must name the blocked
// event (what runs recorded before the fields replay).
func (s *aggregateState) validate(req RepairRequest, byClass bool) error {
	if req.RequestID == "" {
		return errors.New("request_id is empty: send a unique id so a retry of this request is applied once")
	}
	if _, ok := s.findRepair(req.RequestID); ok {
		return nil
	}
	switch {
	case req.Actor == "":
		return errors.New("actor is empty: say who asks for the repair")
	case req.Reason == "":
		return errors.New("reason is empty: say why, for the audit trail")
	case req.Action != ActionRetry && req.Action != ActionSkip && req.Action != ActionPatch:
		return fmt.Errorf("action %q: use retry, skip or patch", req.Action)
	case s.blocked == nil:
		return fmt.Errorf("aggregate %s/%s is not blocked: nothing to repair", s.in.AggregateType, s.in.AggregateID)
	case byClass && req.EventID == "" && req.ExpectErrorClass == "":
		return errors.New("event_id is empty: name the blocked event, or set expect_error_class to repair whatever is blocked here with that class")
	case (!byClass || req.EventID != "") && req.EventID != s.blocked.EventID:
		return fmt.Errorf("event %s is not the blocked event: %s/%s is blocked at event %s (v%d)",
			req.EventID, s.in.AggregateType, s.in.AggregateID, s.blocked.EventID, s.blocked.Version)
	case byClass && req.ExpectErrorClass != "" && req.ExpectErrorClass != s.blocked.ErrorClass:
		return fmt.Errorf("%s/%s is blocked at event %s (v%d) with error class %s, not the expected %s",
			s.in.AggregateType, s.in.AggregateID, s.blocked.EventID, s.blocked.Version, s.blocked.ErrorClass, req.ExpectErrorClass)
	case s.repairing || s.decision != nil:
		return errors.New("another repair of this event is in progress")
	}
	if req.Action == ActionPatch {
		if len(req.Payload) == 0 && req.SchemaVersion == 0 {
			return errors.New("patch needs a payload, a schema_version or both")
		}
		if req.SchemaVersion < 0 {
			return fmt.Errorf("schema_version %d: must be at least 1", req.SchemaVersion)
		}
		if len(req.Payload) > 0 {
			if err := outbox.ValidatePayload(req.Payload, outbox.DefaultMaxPayloadBytes); err != nil {
				return err
			}
		}
	} else if len(req.Payload) > 0 || req.SchemaVersion != 0 {
		return fmt.Errorf("payload and schema_version go with patch, not %s", req.Action)
	}
	return nil
}

// repair applies a validated request: the activity writes the audit row and
// changes the outbox row; the main loop then acts on the decision.
//
// A request that names no event is applied to the blocked one and audited
// under "<request id>/<event id>": one batch request reaches many
// aggregates, and ferry_repairs keeps one row per request id.
func (s *aggregateState) repair(ctx workflow.Context, req RepairRequest, byClass bool) (RepairResult, error) {
	if prev, ok := s.findRepair(req.RequestID); ok {
		prev.Duplicate = true
		return prev, nil
	}
	// Validated before, but another handler may have decided since.
	if err := s.validate(req, byClass); err != nil {
		return RepairResult{}, err
	}
	s.repairing = true
	defer func() { s.repairing = false }()
	audited := req
	if req.EventID == "" {
		audited.EventID = s.blocked.EventID
		audited.RequestID = req.RequestID + "/" + s.blocked.EventID
	}
	var res RepairResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, bookkeepingOptions), RepairActivity, RepairInput{
		Request: audited, AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID, Version: s.blocked.Version,
		Epoch: s.epoch,
	}).Get(ctx, &res)
	if err != nil {
		return RepairResult{}, err
	}
	res.RequestID = req.RequestID // what a repeat of the request is matched by
	s.repairs = append(s.repairs, res)
	if len(s.repairs) > keepRepairs {
		s.repairs = s.repairs[len(s.repairs)-keepRepairs:]
	}
	s.decision = &req
	return res, nil
}

func (s *aggregateState) findRepair(requestID string) (RepairResult, bool) {
	for _, r := range s.repairs {
		if r.RequestID == requestID {
			return r, true
		}
	}
	return RepairResult{}, false
}

// reject drops a repair signal and makes the reason visible where an
// operator looks, not only in the state query: the worker's log (a
// warning), the workflow's memo (MemoRepairRejected, shown in the UI and
// written to history) and the SDK metric ferry_repair_rejected, counted by
// whatever metrics handler the worker's client has.
func (s *aggregateState) reject(ctx workflow.Context, req RepairRequest, err error) {
	line := fmt.Sprintf("%s %s (request %s): %v", req.Action, cmp.Or(req.EventID, "by class "+req.ExpectErrorClass), req.RequestID, err)
	s.rejected = append(s.rejected, line)
	if len(s.rejected) > 20 {
		s.rejected = s.rejected[len(s.rejected)-20:]
	}
	workflow.GetLogger(ctx).Warn("repair rejected", "request_id", req.RequestID, "action", req.Action,
		"event_id", req.EventID, "expect_error_class", req.ExpectErrorClass, "reason", err.Error())
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"action": req.Action}).Counter("ferry_repair_rejected").Inc(1)
	// Runs recorded before the memo rejected without a command.
	if workflow.GetVersion(ctx, rejectionMemoChange, workflow.DefaultVersion, 1) >= 1 {
		if merr := workflow.UpsertMemo(ctx, map[string]any{MemoRepairRejected: line}); merr != nil {
			workflow.GetLogger(ctx).Warn("could not record the rejected repair in the memo", "error", merr)
		}
	}
}

// Change ids of workflow.GetVersion in the aggregate workflow.
const (
	// repairByClassChange: a repair signal without an event id, or with
	// an expected error class (RepairRequest.ExpectErrorClass).
	repairByClassChange = "repair-by-class"
	// rejectionMemoChange: a rejected repair signal upserts
	// MemoRepairRejected.
	rejectionMemoChange = "repair-rejection-memo"
)
