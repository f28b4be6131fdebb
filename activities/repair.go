package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/internal/pgtext"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/repairdb"
	"github.com/ferry-outbox/ferry/workflows"
)

// Error types of repair and replay failures an operator must fix; not
// retryable.
const (
	ErrTypeInvalidRepair = "InvalidRepair"
	ErrTypeNotReplayable = "NotReplayable"
)

// RepairConfig configures Repair.
type RepairConfig struct {
	// Pool reaches the outbox tables and ferry_repairs. Required.
	Pool *pgxpool.Pool
	// Broker re-publishes replays: the publish path's broker target. Nil
	// (a deployment without a broker): replays are refused, naming why.
	Broker delivery.Target
	// Metrics counts quarantines, repairs and replays; nil counts nothing.
	Metrics *metrics.Metrics
}

// Repair holds what the aggregate workflow does with an event it cannot
// publish and what operators ask of it: quarantine, the audited repairs
// (retry, skip, patch), replays of delivered events, and handing back and
// releasing the events a blocked run does not keep.
type Repair struct {
	sender
	pool    *pgxpool.Pool
	metrics *metrics.Metrics
}

// NewRepair validates cfg.
func NewRepair(cfg RepairConfig) (*Repair, error) {
	if cfg.Pool == nil {
		return nil, errors.New("activities: RepairConfig.Pool is nil")
	}
	return &Repair{sender: sender{broker: cfg.Broker}, pool: cfg.Pool, metrics: cfg.Metrics}, nil
}

// Register registers the repair activities under their wire names.
func (a *Repair) Register(r Registry) {
	r.RegisterActivityWithOptions(a.QuarantineEvent, activity.RegisterOptions{Name: workflows.QuarantineActivity})
	r.RegisterActivityWithOptions(a.ApplyRepair, activity.RegisterOptions{Name: workflows.RepairActivity})
	r.RegisterActivityWithOptions(a.ReplayEvent, activity.RegisterOptions{Name: workflows.ReplayActivity})
	r.RegisterActivityWithOptions(a.HoldEvents, activity.RegisterOptions{Name: workflows.HoldEventsActivity})
	r.RegisterActivityWithOptions(a.ReleaseHeld, activity.RegisterOptions{Name: workflows.ReleaseHeldActivity})
}

// QuarantineEvent marks an event quarantined and counts it.
func (a *Repair) QuarantineEvent(ctx context.Context, in workflows.QuarantineInput) error {
	msg := pgtext.Truncate(fmt.Sprintf("quarantined (%s): %s", in.ErrorClass, in.Error), 1000)
	if in.Epoch > 0 {
		ok, err := relaydb.QuarantineFenced(ctx, a.pool, in.EventID, in.AggregateType, in.AggregateID, in.Epoch, in.ErrorClass, msg)
		if err != nil {
			return fmt.Errorf("quarantine event %s: %w", in.EventID, err)
		}
		if !ok {
			if owned, err := relaydb.Owned(ctx, a.pool, in.AggregateType, in.AggregateID, in.Epoch); err != nil || !owned {
				return lostOwnership("quarantining event "+in.EventID, in.AggregateType, in.AggregateID, in.Epoch)
			}
			// Owned, and the row is published: nothing to quarantine.
		}
	} else if err := relaydb.Quarantine(ctx, a.pool, in.EventID, in.ErrorClass, msg); err != nil {
		return fmt.Errorf("quarantine event %s: %w", in.EventID, err)
	}
	a.metrics.Quarantined(in.EventType, in.ErrorClass)
	return nil
}

// findRepair looks requestID up in the audit: found, it fills res as the
// earlier answer (AuditID, Duplicate) and reports true.
func findRepair(ctx context.Context, tx pgx.Tx, requestID string, res *workflows.RepairResult) (bool, error) {
	id, err := repairdb.FindRepair(ctx, tx, requestID)
	switch {
	case err == nil:
		res.AuditID, res.Duplicate = id, true
		return true, nil
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	default:
		return false, fmt.Errorf("look up request %s: %w", requestID, err)
	}
}

// ApplyRepair writes the repair's audit row and applies it to the outbox
// row, in one transaction. A request id that was applied before returns
// the earlier audit row and changes nothing.
func (a *Repair) ApplyRepair(ctx context.Context, in workflows.RepairInput) (workflows.RepairResult, error) {
	req := in.Request
	res := workflows.RepairResult{RequestID: req.RequestID, Action: req.Action, EventID: req.EventID, Version: in.Version}
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if dup, err := findRepair(ctx, tx, req.RequestID, &res); dup || err != nil {
			return err
		}
		if in.Epoch > 0 {
			owned, err := relaydb.LockOwner(ctx, tx, in.AggregateType, in.AggregateID, in.Epoch)
			if err != nil {
				return fmt.Errorf("lock the owner of %s/%s: %w", in.AggregateType, in.AggregateID, err)
			}
			if !owned {
				return lostOwnership("repair of event "+req.EventID, in.AggregateType, in.AggregateID, in.Epoch)
			}
		}
		ev, err := repairdb.LockForRepair(ctx, tx, req.EventID)
		if errors.Is(err, pgx.ErrNoRows) {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("event %s is not in outbox_events", req.EventID), ErrTypeInvalidRepair, nil)
		}
		if err != nil {
			return fmt.Errorf("load event %s: %w", req.EventID, err)
		}
		if ev.AggregateType != in.AggregateType || ev.AggregateID != in.AggregateID || ev.Version != in.Version {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("event %s is %s/%s v%d, not %s/%s v%d",
				req.EventID, ev.AggregateType, ev.AggregateID, ev.Version, in.AggregateType, in.AggregateID, in.Version), ErrTypeInvalidRepair, nil)
		}
		newPayload, newSchema := ev.Payload, ev.SchemaVersion
		switch req.Action {
		case workflows.ActionSkip, "policy-skip":
			err = repairdb.Skip(ctx, tx, req.EventID)
		case workflows.ActionRetry:
			err = repairdb.Retry(ctx, tx, req.EventID)
		case workflows.ActionPatch:
			if len(req.Payload) > 0 {
				if verr := outbox.ValidatePayload(req.Payload, outbox.DefaultMaxPayloadBytes); verr != nil {
					return temporal.NewNonRetryableApplicationError(verr.Error(), ErrTypeInvalidRepair, nil)
				}
				newPayload = string(req.Payload)
			}
			if req.SchemaVersion > 0 {
				newSchema = req.SchemaVersion
			}
			if err = repairdb.Patch(ctx, tx, req.EventID, newPayload, newSchema); err != nil {
				break
			}
			// Read back the stored form, so the digest is of what jsonb keeps.
			newPayload, err = repairdb.StoredPayload(ctx, tx, req.EventID)
		default:
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("action %q is not a repair", req.Action), ErrTypeInvalidRepair, nil)
		}
		if err != nil {
			return fmt.Errorf("%s event %s: %w", req.Action, req.EventID, err)
		}
		res.AuditID, err = repairdb.InsertRepair(ctx, tx, repairAudit(req, ev, newPayload, newSchema))
		return err
	})
	if err != nil {
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) {
			return res, err
		}
		return res, fmt.Errorf("apply %s to %s: %w", req.Action, req.EventID, err)
	}
	if !res.Duplicate {
		a.metrics.Repaired(req.Action)
	}
	return res, nil
}

// ReplayEvent re-publishes a delivered (published) event with its original
// message id, headers and trace context, and audits it. The row keeps its
// status: a replay is a copy, not a new delivery state. A request id seen
// before does nothing.
//
// The audit row is written before the publish, in a transaction committed
// once the broker confirmed: a request the audit refuses (no actor, no
// reason) publishes nothing, and a failed publish leaves no audit row, so
// a retry publishes and audits again. (A commit lost after the confirm
// publishes once more on the retry: replays are at-least-once, and keep
// the message id consumers deduplicate by.) A row whose payload retention
// blanked is refused: there is nothing left to replay.
func (a *Repair) ReplayEvent(ctx context.Context, in workflows.ReplayEventInput) error {
	_, err := repairdb.FindRepair(ctx, a.pool, in.RequestID)
	if err == nil {
		return nil // done before, even if the row is gone since
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("look up request %s: %w", in.RequestID, err)
	}
	if a.broker == nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"event %s: replay re-publishes to RabbitMQ, and this worker has no broker (Config.NoBroker; ferry: --no-broker): nothing was published", in.EventID),
			ErrTypeNotReplayable, nil)
	}
	ev, err := loadEvent(ctx, a.pool, in.EventID)
	if err != nil {
		return err
	}
	if ev.Status != "published" {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"event %s is %s, not published: replay re-delivers delivered events only (repair a blocked one instead)", in.EventID, ev.Status),
			ErrTypeNotReplayable, nil)
	}
	if blanked(ev.Payload) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"event %s's payload was blanked by payload retention (Config.PayloadRetention; ferry: --payload-retention): nothing is left to replay, and nothing was published", in.EventID),
			ErrTypeNotReplayable, nil)
	}
	d := digest(string(ev.Payload))
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		inserted, err := repairdb.InsertReplay(ctx, tx, repairdb.Audit{RequestID: in.RequestID, Actor: in.Actor, Action: "replay", EventID: in.EventID,
			AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, Version: ev.Version, Reason: in.Reason,
			PayloadSHA256Before: d, PayloadSHA256After: d, SchemaVersionBefore: int(ev.SchemaVersion), SchemaVersionAfter: int(ev.SchemaVersion)})
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23514" { // check_violation: actor or reason empty
				return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
					"audit of replay %s refused (%s): nothing was published", in.RequestID, pgErr.ConstraintName), ErrTypeNotReplayable, nil)
			}
			return fmt.Errorf("audit replay of %s: %w", in.EventID, err)
		}
		if !inserted {
			return errAlreadyReplayed // an earlier attempt or run did it
		}
		return a.send(ctx, in.EventID, ev)
	})
	if errors.Is(err, errAlreadyReplayed) {
		return nil
	}
	if err != nil {
		return err
	}
	a.metrics.Repaired("replay")
	return nil
}

// errAlreadyReplayed ends ReplayEvent's transaction without a publish.
var errAlreadyReplayed = errors.New("replayed before")

// blanked says whether payload retention replaced the payload
// (PurgeOutbox writes JSON null; NULL is not allowed by the schema, but
// would mean the same).
func blanked(payload []byte) bool {
	p := strings.TrimSpace(string(payload))
	return p == "" || p == "null"
}

// HoldEvents hands back to PostgreSQL the events a blocked aggregate
// workflow does not keep (AggregateInput.MaxBlockedRefs): they stay
// pending and are claimed again once ReleaseHeld ran, or after
// workflows.HoldInterval.
func (a *Repair) HoldEvents(ctx context.Context, in workflows.HoldInput) error {
	msg := fmt.Sprintf("%saggregate blocked at event %s; claimed again after its repair", relaydb.HeldPrefix, in.BlockedEventID)
	if in.Epoch > 0 {
		ok, err := relaydb.HoldFenced(ctx, a.pool, in.EventIDs, in.AggregateType, in.AggregateID, in.Epoch, workflows.HoldInterval, msg)
		if err != nil {
			return fmt.Errorf("hold %d events of %s/%s: %w", len(in.EventIDs), in.AggregateType, in.AggregateID, err)
		}
		if !ok {
			return lostOwnership(fmt.Sprintf("handing back %d events", len(in.EventIDs)), in.AggregateType, in.AggregateID, in.Epoch)
		}
		return nil
	}
	if err := relaydb.Hold(ctx, a.pool, in.EventIDs, workflows.HoldInterval, msg); err != nil {
		return fmt.Errorf("hold %d events of %s/%s: %w", len(in.EventIDs), in.AggregateType, in.AggregateID, err)
	}
	return nil
}

// ReleaseHeld makes an aggregate's held events claimable at once.
func (a *Repair) ReleaseHeld(ctx context.Context, in workflows.ReleaseHeldInput) error {
	if err := relaydb.ReleaseHeld(ctx, a.pool, in.AggregateType, in.AggregateID); err != nil {
		return fmt.Errorf("release held events of %s/%s: %w", in.AggregateType, in.AggregateID, err)
	}
	return nil
}

// repairAudit is the audit row of req applied to ev, which now holds
// newPayload (stored form) and newSchema.
func repairAudit(req workflows.RepairRequest, ev repairdb.RepairTarget, newPayload string, newSchema int) repairdb.Audit {
	return repairdb.Audit{RequestID: req.RequestID, Actor: req.Actor, Action: req.Action, EventID: req.EventID,
		AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, Version: ev.Version, Reason: req.Reason,
		PayloadSHA256Before: digest(ev.Payload), PayloadSHA256After: digest(newPayload),
		SchemaVersionBefore: ev.SchemaVersion, SchemaVersionAfter: newSchema}
}

func digest(payload string) string {
	sum := sha256.Sum256([]byte(payload))
	return hex.EncodeToString(sum[:])
}

// RepairUnheld repairs a quarantined row that no workflow holds: one whose
// start or signal Temporal refused as invalid (poller.Config.MaxRefusedAttempts),
// one migration 0007 quarantined, or one whose blocked workflow was
// terminated. It is audited in ferry_repairs like ApplyRepair and applied
// once per request id. skip marks the row skipped and moves the aggregate's
// cursor past it, only when it is the next version to deliver (so no
// earlier event is passed over); retry re-queues it as pending with fresh
// attempts, and patch does so with the new payload or schema version.
func RepairUnheld(ctx context.Context, pool *pgxpool.Pool, req workflows.RepairRequest) (workflows.RepairResult, error) {
	res := workflows.RepairResult{RequestID: req.RequestID, Action: req.Action, EventID: req.EventID}
	switch {
	case req.RequestID == "" || req.Actor == "" || req.Reason == "":
		return res, fmt.Errorf("%w: a repair needs a request id, an actor and a reason", ErrInvalidRepair)
	case req.Action != workflows.ActionSkip && req.Action != workflows.ActionRetry && req.Action != workflows.ActionPatch:
		return res, fmt.Errorf("%w: action %q: use retry, skip or patch", ErrInvalidRepair, req.Action)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if dup, err := findRepair(ctx, tx, req.RequestID, &res); dup || err != nil {
			return err
		}
		ev, err := repairdb.LockWithCursor(ctx, tx, req.EventID)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: event %s is not in outbox_events", ErrInvalidRepair, req.EventID)
		}
		if err != nil {
			return fmt.Errorf("load event %s: %w", req.EventID, err)
		}
		res.Version = ev.Version
		if ev.Status != "quarantined" {
			return fmt.Errorf("%w: event %s is %s, not quarantined: nothing to repair", ErrInvalidRepair, req.EventID, ev.Status)
		}
		newPayload, newSchema := ev.Payload, ev.SchemaVersion
		switch req.Action {
		case workflows.ActionSkip:
			if ev.Version != ev.Delivered+1 {
				return fmt.Errorf("%w: event %s is %s/%s v%d, but v%d is not delivered yet: repair that one first, so no event is passed over",
					ErrInvalidRepair, req.EventID, ev.AggregateType, ev.AggregateID, ev.Version, ev.Delivered+1)
			}
			err = repairdb.Skip(ctx, tx, req.EventID)
		default:
			if len(req.Payload) > 0 {
				if verr := outbox.ValidatePayload(req.Payload, outbox.DefaultMaxPayloadBytes); verr != nil {
					return fmt.Errorf("%w: %w", ErrInvalidRepair, verr)
				}
				newPayload = string(req.Payload)
			}
			if req.SchemaVersion > 0 {
				newSchema = req.SchemaVersion
			}
			if err = repairdb.Requeue(ctx, tx, req.EventID, newPayload, newSchema); err == nil {
				newPayload, err = repairdb.StoredPayload(ctx, tx, req.EventID)
			}
			if err == nil {
				err = handRepairToWorkflow(ctx, tx, ev.AggregateType, ev.AggregateID)
			}
		}
		if err != nil {
			return fmt.Errorf("%s event %s: %w", req.Action, req.EventID, err)
		}
		res.AuditID, err = repairdb.InsertRepair(ctx, tx, repairAudit(req, ev, newPayload, newSchema))
		return err
	})
	if err != nil {
		return res, fmt.Errorf("repair %s: %w", req.EventID, err)
	}
	return res, nil
}

// handRepairToWorkflow: in a fleet of the publish-first lane, the event an
// operator re-queued goes to its aggregate's workflow (retries visible in
// the Temporal UI, quarantined again if it fails again), not back to the
// lane; the aggregate is the workflow's from the repair's transaction on.
// The workflow lane needs nothing: every event goes to the workflow.
func handRepairToWorkflow(ctx context.Context, tx pgx.Tx, aggregateType, aggregateID string) error {
	lane, err := relaydb.FleetLane(ctx, tx)
	if err != nil || lane != poller.LanePublishFirst {
		return err
	}
	_, err = relaydb.HandToWorkflow(ctx, tx, aggregateType, aggregateID, metrics.CauseRepair)
	return err
}

// ErrInvalidRepair: RepairUnheld refused the request as it is; sending it
// again changes nothing.
var ErrInvalidRepair = errors.New("invalid repair")
