package activities

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/internal/failpoint"
	"github.com/ferry-outbox/ferry/outbox"
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
	rows, err := a.loadBatch(ctx, in.Events)
	if err != nil {
		return res, err
	}

	// upto: the events that can be tried, ending before the first whose row
	// is missing or disagrees with the signal (PublishEvent classifies it).
	upto := len(in.Events)
	var (
		msgs   []broker.Message
		spans  []trace.Span
		at     []int // index in in.Events of each message
		events []outbox.PublishRow
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
		m, span := a.message(ctx, ref.ID, ev)
		msgs, spans, at, events = append(msgs, m), append(spans, span), append(at, i), append(events, ev)
	}

	n, pubErr := a.pub.PublishBatch(ctx, msgs)
	for i, span := range spans {
		if i >= n && pubErr != nil {
			span.SetStatus(codes.Error, pubErr.Error())
		}
		span.End()
	}
	done := upto
	if n < len(msgs) {
		done = at[n]
		pubErr = classifyPublish(pubErr)
		noteError(ctx, a.pool, msgs[n].ID, pubErr)
		var appErr *temporal.ApplicationError
		if errors.As(pubErr, &appErr) {
			a.metrics.PublishFailed(appErr.Type())
		}
		res.Stopped = pubErr.Error()
	}
	if n > 0 {
		failpoint.Inject("worker.after-confirm")
		ids := make([]string, n)
		for i := range n {
			ids[i] = msgs[i].ID
		}
		if err := outbox.MarkBatchPublished(ctx, a.pool, ids, in.AggregateType, in.AggregateID); err != nil {
			a.metrics.PublishFailed("MarkPublished")
			return workflows.PublishBatchResult{}, fmt.Errorf("mark %d events of %s/%s published: %w", n, in.AggregateType, in.AggregateID, err)
		}
		for _, ev := range events[:n] {
			a.metrics.Published(ev.AggregateType, ev.DueAt)
		}
	}
	if done == 0 {
		if pubErr != nil {
			return res, pubErr
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
func (a *Publish) loadBatch(ctx context.Context, events []workflows.EventRef) (map[string]outbox.PublishRow, error) {
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
	}
	out, err := outbox.LoadManyForPublish(ctx, a.pool, ids)
	if err != nil {
		return nil, fmt.Errorf("load %d events: %w", len(ids), err)
	}
	return out, nil
}
