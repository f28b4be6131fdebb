package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// The end of a run that owns its aggregate under an epoch (Revision3, the
// publish-first lane): instead of idling it gives the aggregate back to
// the lane as soon as it has published everything relays handed it.

// ReleaseRetry is how long a run whose release found versions handed to
// it but not yet delivered waits for their signal before it asks again
// (the signal may have failed: the relay hands the rows over again after
// a backoff).
const ReleaseRetry = 10 * time.Second

// release gives the aggregate back (true: the run completes) or waits for
// the versions relays handed it (false). A signal of a newer epoch that
// arrives meanwhile, or right after the release, is the lane handing the
// aggregate to this run anew: the run goes on as its owner.
func (s *aggregateState) release(ctx workflow.Context, signals workflow.ReceiveChannel) (bool, error) {
	if err := workflow.Await(ctx, func() bool { return s.handlersDone(ctx) }); err != nil {
		return false, err
	}
	s.drain(signals)
	if len(s.pending) > 0 || s.cursorUnknown {
		return false, nil
	}
	epoch := s.epoch
	var res ReleaseResult
	actx := workflow.WithActivityOptions(ctx, bookkeepingOptions)
	if err := workflow.ExecuteActivity(actx, ReleaseAggregateActivity, ReleaseInput{
		AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID, Epoch: epoch,
	}).Get(ctx, &res); err != nil {
		return false, err
	}
	log := workflow.GetLogger(ctx)
	if res.Busy {
		log.Info("versions were handed to this run but are not delivered yet; waiting for them before releasing the aggregate",
			"delivered", res.Delivered, "handed", res.HandedVersion)
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(signals, func(c workflow.ReceiveChannel, _ bool) {
			var arg EventsSignalArg
			c.Receive(ctx, &arg)
			s.receive(arg)
		})
		sel.AddFuture(workflow.NewTimer(ctx, ReleaseRetry), func(workflow.Future) {})
		sel.Select(ctx)
		return false, nil
	}
	if res.Owner != "" {
		log.Info("the aggregate was no longer this run's when it released it", "epoch", epoch, "owner", res.Owner)
	} else {
		log.Info("released the aggregate to the publish-first lane", "epoch", epoch, "delivered", s.delivered)
	}
	// From here the run publishes nothing under its epoch. What arrives
	// now is either old (versions it delivered: dropped) or the lane
	// handing the aggregate over again, under a newer epoch.
	s.drain(signals)
	return s.epoch == epoch, nil
}
