package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/internal/failpoint"
	"github.com/ferry-outbox/ferry/internal/publishjournal"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/workflows"
)

// PublishBatch is the fast path of the aggregate workflow: it loads the
// rows of consecutive events in one query, publishes them in one confirm
// window and marks the confirmed ones in one statement. It publishes the
// longest prefix it can and says where it stopped; it fails only when not
// even the first event could be published, and then the workflow publishes
// that event with PublishEvent, whose retries the Temporal UI shows.
//
// Asked (PublishBatchInput.Settings), it answers with the workflow
// settings this worker was registered with, and publishes at most their
// PublishBatchSize events (none, and no error, when the fast path is off).
func (a *Publish) PublishBatch(ctx context.Context, in workflows.PublishBatchInput) (workflows.PublishBatchResult, error) {
	var res workflows.PublishBatchResult
	if in.LoadCursor {
		cur, err := a.LoadAggregateCursor(ctx, workflows.CursorInput{AggregateType: in.AggregateType, AggregateID: in.AggregateID})
		if err != nil {
			return res, err
		}
		res.Cursor = cur.Delivered
		in.Events = runAfter(in.Events, cur.Delivered)
	}
	if in.Settings {
		// The run does not know its batch size yet: this worker's applies.
		res.Settings = a.workflowSettings()
		in.Events = in.Events[:min(len(in.Events), max(a.settings.PublishBatchSize, 0))]
	}
	if len(in.Events) == 0 {
		return res, nil
	}
	if err := a.checkOwner(ctx, "publish", in.AggregateType, in.AggregateID, in.Epoch); err != nil {
		return res, err
	}
	rows, err := a.loadBatch(ctx, in.Events)
	if err != nil {
		return res, err
	}

	// upto: the events that can be tried, ending before the first whose row
	// is missing or disagrees with the signal (PublishEvent classifies it),
	// or that would go nowhere.
	upto := len(in.Events)
	var (
		msgs    []delivery.Event
		items   []batchItem
		planErr error
	)
	for i, ref := range in.Events {
		ev, ok := rows[ref.ID]
		if !ok || ev.AggregateType != in.AggregateType || ev.AggregateID != in.AggregateID || ev.Version != ref.Version {
			upto = i
			res.Stopped = fmt.Sprintf("event %s (v%d) is missing from outbox_events or does not match the signal", ref.ID, ref.Version)
			break
		}
		if ev.Status == "published" {
			continue
		}
		p, err := a.targets.planFor(ref.ID, ev)
		if err != nil {
			upto, planErr = i, err
			break
		}
		it := batchItem{at: i, id: ref.ID, row: ev, plan: p, msg: -1}
		if p.broker {
			it.msg = len(msgs)
			msgs = append(msgs, delivery.Event{ID: ref.ID, Row: ev})
		}
		items = append(items, it)
	}

	n, pubErr := 0, error(nil)
	if len(msgs) > 0 {
		defer publishjournal.Run(ctx, a.pool, in.AggregateType, in.AggregateID, msgs[0].Row.Version, msgs[len(msgs)-1].Row.Version, in.Epoch).End(&pubErr)
		n, pubErr = a.broker.Publish(ctx, msgs)
	}
	// An event is done when the broker confirmed it (or it skips the
	// broker) and each of its workflow destinations took it; the first
	// that is not ends the run.
	done := upto
	var (
		failErr error
		failID  string
		marked  []batchItem
	)
	for _, it := range items {
		if it.msg >= n {
			done, failID, failErr = it.at, it.id, classifyPublish(pubErr)
			break
		}
		if err := a.targets.deliver(ctx, it.id, it.row, it.plan); err != nil {
			done, failID, failErr = it.at, it.id, err
			break
		}
		marked = append(marked, it)
	}
	if failErr == nil && planErr != nil {
		failID, failErr = in.Events[upto].ID, planErr
	}
	if failErr != nil {
		noteError(ctx, a.pool, failID, failErr)
		var appErr *temporal.ApplicationError
		if errors.As(failErr, &appErr) {
			a.metrics.PublishFailed(appErr.Type())
		}
		res.Stopped = failErr.Error()
	}
	if len(marked) > 0 {
		failpoint.Inject("worker.after-confirm")
		ids := make([]string, len(marked))
		for i, it := range marked {
			ids[i] = it.id
		}
		if err := a.markBatch(ctx, ids, in); err != nil {
			a.metrics.PublishFailed(errTypeMarkPublished)
			return workflows.PublishBatchResult{}, err
		}
		for _, it := range marked {
			a.metrics.Published(it.row.AggregateType, it.row.DueAt)
		}
		a.metrics.LanePublished(metrics.PathWorkflow, len(marked))
	}
	if done == 0 {
		if failErr != nil {
			return res, failErr
		}
		return res, temporal.NewNonRetryableApplicationError(res.Stopped, ErrTypeMismatch, nil)
	}

	res.Published = done
	for _, ref := range in.Events[:done] {
		ev := rows[ref.ID]
		if effects := a.effects(ev.AggregateType, ev.EventType); len(effects) > 0 {
			res.Effects = append(res.Effects, workflows.EventEffects{Version: ref.Version, Effects: effects})
		}
	}
	activity.GetLogger(ctx).Debug("published batch", "aggregate", in.AggregateType+"/"+in.AggregateID,
		"events", len(in.Events), "published", done, "sent", n)
	return res, nil
}

// markBatch marks the confirmed events of a batch: under the run's epoch
// when it has one.
func (a *Publish) markBatch(ctx context.Context, ids []string, in workflows.PublishBatchInput) error {
	if in.Epoch == 0 {
		if err := relaydb.MarkBatchPublished(ctx, a.pool, ids, in.AggregateType, in.AggregateID); err != nil {
			return fmt.Errorf("mark %d events of %s/%s published: %w", len(ids), in.AggregateType, in.AggregateID, err)
		}
		return nil
	}
	ok, err := relaydb.MarkBatchPublishedFenced(ctx, a.pool, ids, in.AggregateType, in.AggregateID, in.Epoch)
	if err != nil {
		return fmt.Errorf("mark %d events of %s/%s published: %w", len(ids), in.AggregateType, in.AggregateID, err)
	}
	if !ok {
		return lostOwnership(fmt.Sprintf("marking %d events published", len(ids)), in.AggregateType, in.AggregateID, in.Epoch)
	}
	return nil
}

// batchItem is one event of a batch that is not published yet: where it
// is in the input, its row, where it goes and, when it goes to the broker,
// its message's index (else -1).
type batchItem struct {
	at   int
	id   string
	row  relaydb.PublishRow
	plan plan
	msg  int
}

// runAfter is the run of events, ascending, whose versions follow
// delivered without a gap; events at or below delivered are dropped (an
// earlier run published them).
func runAfter(events []workflows.EventRef, delivered int64) []workflows.EventRef {
	next := delivered + 1
	var run []workflows.EventRef
	for _, ev := range events {
		switch {
		case ev.Version < next:
			continue
		case ev.Version == next:
			run = append(run, ev)
			next++
		default:
			return run
		}
	}
	return run
}

// loadBatch reads the rows of events by id.
func (a *Publish) loadBatch(ctx context.Context, events []workflows.EventRef) (map[string]relaydb.PublishRow, error) {
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
	}
	out, err := relaydb.LoadManyForPublish(ctx, a.pool, ids)
	if err != nil {
		return nil, fmt.Errorf("load %d events: %w", len(ids), err)
	}
	return out, nil
}
