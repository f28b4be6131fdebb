package workflows

import (
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// MaxReplayEvents bounds one replay request: replays are targeted, never
// "everything".
const MaxReplayEvents = 1000

// Replay re-publishes already delivered events, one after another, with
// their original message ids and trace context, each audited under
// "<request id>/<event id>". A request without an actor or a reason is
// refused before anything is published. Its workflow ID is "ferry-replay/<request id>",
// so a repeated request is the same workflow.
func Replay(ctx workflow.Context, in ReplayInput) (ReplayResult, error) {
	if len(in.EventIDs) == 0 || len(in.EventIDs) > MaxReplayEvents {
		return ReplayResult{}, temporal.NewNonRetryableApplicationError(
			"a replay takes 1 to 1000 event ids", "InvalidReplay", nil)
	}
	// Runs recorded before this check went straight to the activity.
	if workflow.GetVersion(ctx, replayValidateChange, workflow.DefaultVersion, 1) >= 1 {
		switch {
		case strings.TrimSpace(in.Actor) == "":
			return ReplayResult{}, temporal.NewNonRetryableApplicationError(
				"actor is empty: say who asks for the replay; nothing was published", "InvalidReplay", nil)
		case strings.TrimSpace(in.Reason) == "":
			return ReplayResult{}, temporal.NewNonRetryableApplicationError(
				"reason is empty: say why, for the audit trail; nothing was published", "InvalidReplay", nil)
		}
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: publishAttemptTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
			MaximumAttempts:    DefaultMaxAttempts,
		},
	})
	var res ReplayResult
	for _, id := range in.EventIDs {
		err := workflow.ExecuteActivity(actx, ReplayActivity, ReplayEventInput{
			RequestID: in.RequestID + "/" + id,
			EventID:   id,
			Reason:    in.Reason,
			Actor:     in.Actor,
		}).Get(ctx, nil)
		if err != nil {
			return res, err
		}
		res.Replayed = append(res.Replayed, id)
	}
	return res, nil
}

// replayValidateChange: the replay workflow refuses an empty actor or
// reason before its first activity.
const replayValidateChange = "replay-validate"

// ReplayWorkflowID is the replay workflow's ID for a request id.
func ReplayWorkflowID(requestID string) string { return "ferry-replay/" + requestID }
