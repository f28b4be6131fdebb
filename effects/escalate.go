package effects

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/workflows"
)

// An escalated effect sets the same search attributes as a blocked
// aggregate, so the Temporal UI's dead-letter view (`FerryBlocked = true`)
// lists both; the workflow type tells them apart.
var (
	saBlocked          = temporal.NewSearchAttributeKeyBool(workflows.SABlocked)
	saBlockedEventID   = temporal.NewSearchAttributeKeyKeyword(workflows.SABlockedEventID)
	saBlockedEventType = temporal.NewSearchAttributeKeyKeyword(workflows.SABlockedEventType)
	saErrorClass       = temporal.NewSearchAttributeKeyKeyword(workflows.SAErrorClass)
	saBlockedSince     = temporal.NewSearchAttributeKeyTime(workflows.SABlockedSince)
)

func setBlocked(ctx workflow.Context, in workflows.EffectInput, class string, since time.Time) {
	err := workflow.UpsertTypedSearchAttributes(ctx,
		saBlocked.ValueSet(true),
		saBlockedEventID.ValueSet(in.EventID),
		saBlockedEventType.ValueSet(in.EventType),
		saErrorClass.ValueSet(class),
		saBlockedSince.ValueSet(since),
	)
	if err != nil {
		workflow.GetLogger(ctx).Error("set search attributes of an escalated effect", "error", err)
	}
}

func clearBlocked(ctx workflow.Context) {
	err := workflow.UpsertTypedSearchAttributes(ctx,
		saBlocked.ValueSet(false),
		saBlockedEventID.ValueUnset(),
		saBlockedEventType.ValueUnset(),
		saErrorClass.ValueUnset(),
		saBlockedSince.ValueUnset(),
	)
	if err != nil {
		workflow.GetLogger(ctx).Error("clear search attributes of an effect", "error", err)
	}
}

func upsertMemo(ctx workflow.Context, summary map[string]any) {
	if err := workflow.UpsertMemo(ctx, map[string]any{MemoKey: summary}); err != nil {
		workflow.GetLogger(ctx).Error("upsert effect memo", "error", err)
	}
}

// resolutions receives operators' decisions, keeping the rejected ones
// (with the reason) for the state query.
type resolutions struct {
	ch       workflow.ReceiveChannel
	rejected *[]string
}

func newResolutions(ctx workflow.Context, rejected *[]string) resolutions {
	return resolutions{ch: workflow.GetSignalChannel(ctx, ResolveSignal), rejected: rejected}
}

// take returns the next valid resolution already received, if any.
func (r resolutions) take() (Resolution, bool) {
	for {
		var res Resolution
		if !r.ch.ReceiveAsync(&res) {
			return Resolution{}, false
		}
		if err := res.Validate(); err != nil {
			*r.rejected = append(*r.rejected, err.Error())
			if len(*r.rejected) > 20 {
				*r.rejected = (*r.rejected)[len(*r.rejected)-20:]
			}
			continue
		}
		return res, true
	}
}

// wait blocks until d passes (false) or a valid resolution arrives (true).
// d <= 0 waits for a resolution only.
func (r resolutions) wait(ctx workflow.Context, d time.Duration) (Resolution, bool) {
	if res, ok := r.take(); ok {
		return res, true
	}
	timerCtx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	var timer workflow.Future
	if d > 0 {
		timer = workflow.NewTimer(timerCtx, d)
	}
	for {
		fired := false
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(r.ch, func(workflow.ReceiveChannel, bool) {})
		if timer != nil {
			sel.AddFuture(timer, func(workflow.Future) { fired = true })
		}
		sel.Select(ctx)
		if res, ok := r.take(); ok {
			return res, true
		}
		if fired {
			return Resolution{}, false
		}
	}
}
