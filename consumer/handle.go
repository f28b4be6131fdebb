package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/internal/backoff"
	"github.com/ferry-outbox/ferry/outbox"
)

// handle takes one delivery to its outcome and acknowledges it. stop ends
// with Stop; work lasts up to ShutdownTimeout longer.
func (c *Consumer) handle(stop, work context.Context, j job) {
	if !j.sess.alive() {
		// Its channel is gone, so it can no longer be acknowledged; the
		// broker has put it back and delivers it again.
		return
	}
	d := j.d
	res := Result{Delivery: d, Deliveries: deliveryCount(d) + 1}
	ev, err := decode(d)
	if err == nil {
		err = c.cfg.Inbox.Validate(ev)
	}
	res.Event = ev
	if err != nil {
		res.Err = err
		c.park(j, res, Quarantined, CauseInvalidEvent, err.Error())
		return
	}
	payload, version, err := c.cfg.Schemas.Upcast(ev.EventType, ev.SchemaVersion, ev.Payload)
	if err != nil {
		res.Err = err
		c.park(j, res, Quarantined, CauseSchema, err.Error())
		return
	}
	ev.Payload, ev.SchemaVersion = payload, version
	res.Event = ev

	// One consumer span per delivery, continuing the producer's trace
	// (command → outbox → publish → here).
	work = propagation.TraceContext{}.Extract(work, headerCarrier(d.Headers))
	work, span := c.cfg.TracerProvider.Tracer("github.com/ferry-outbox/ferry/consumer").Start(work, "ferry.consume "+ev.EventType,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.message.id", ev.ID),
			attribute.String("messaging.destination.name", c.cfg.Queue),
			attribute.String("ferry.aggregate", ev.AggregateType+"/"+ev.AggregateID),
			attribute.Int64("ferry.aggregate_version", ev.AggregateVersion),
		))
	defer span.End()

	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(work, c.cfg.HandlerTimeout)
		out, err := c.cfg.Inbox.Process(ctx, ev, c.cfg.Handler)
		cancel()
		var herr *inbox.HandlerError
		switch {
		case errors.Is(err, inbox.ErrInvalidEvent):
			res.Err = err
			c.park(j, res, Quarantined, CauseInvalidEvent, err.Error())
			return
		case errors.As(err, &herr):
			res.Err = err
			c.failed(j, res)
			return
		case err != nil:
			// PostgreSQL, not the event: retry in place. Returning the
			// message would count a delivery and, over a long outage, park
			// events that are fine.
			if stop.Err() != nil || !j.sess.alive() {
				return // the broker redelivers it
			}
			wait := backoff.Exponential(c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff, attempt)
			c.log.Warn("inbox unavailable; retrying the delivery in place", "event_id", ev.ID, "error", err, "retry_in", wait)
			select {
			case <-stop.Done():
			case <-j.sess.closed:
			case <-time.After(wait):
			}
			continue
		}
		res.LastApplied = out.LastApplied
		switch out.Outcome {
		case inbox.Applied:
			res.Outcome = Applied
		case inbox.Duplicate:
			res.Outcome = Duplicate
		case inbox.Stale:
			res.Outcome = Stale
			res.Reason = fmt.Sprintf("version %d is not after the last applied version %d", ev.AggregateVersion, out.LastApplied)
		case inbox.Gap:
			c.gap(j, res)
			return
		}
		c.observe(res)
		c.ack(j)
		return
	}
}

// failed handles a handler error: back to the queue after a backoff, or,
// on the last delivery the queue allows, parked with the error.
func (c *Consumer) failed(j job, res Result) {
	if res.Deliveries > c.cfg.DeliveryLimit {
		c.park(j, res, Parked, CauseHandlerFailed,
			fmt.Sprintf("handler failed on all %d deliveries; last error: %v", res.Deliveries, res.Err))
		return
	}
	wait := backoff.Exponential(c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff, res.Deliveries)
	res.Outcome = Retried
	res.Reason = fmt.Sprintf("handler failed on delivery %d of %d; back to the queue in %s", res.Deliveries, c.cfg.DeliveryLimit+1, wait.Round(time.Millisecond))
	c.observe(res)
	c.retryLater(j.d, wait)
}

// gap sends a copy of the delivery through <queue>.retry, or parks it once
// it has waited GapTimeout for the missing version.
func (c *Consumer) gap(j job, res Result) {
	now := time.Now()
	since := now
	if ms, ok := toInt64(j.d.Headers[HeaderGapSince]); ok && ms > 0 {
		since = time.UnixMilli(ms)
	}
	ev := res.Event
	waited := now.Sub(since)
	if waited >= c.cfg.GapTimeout {
		c.park(j, res, Parked, CauseGapTimeout, fmt.Sprintf(
			"version %d of %s/%s waited %s for version %d (last applied %d), longer than the gap timeout %s; "+
				"if version %d is blocked at Ferry (ferry blocked), repair it there, then move this message back to %s or ferry replay it; "+
				"a version skipped at Ferry (ferry_repairs) never comes: discard this message or apply it by hand",
			ev.AggregateVersion, ev.AggregateType, ev.AggregateID, waited.Round(time.Second), res.LastApplied+1,
			res.LastApplied, c.cfg.GapTimeout, res.LastApplied+1, c.cfg.Queue))
		return
	}
	msg := republish(j.d, amqp.Table{HeaderGapSince: since.UnixMilli(), HeaderOriginalRoutingKey: originalRoutingKey(j.d)})
	msg.Expiration = strconv.FormatInt(c.cfg.GapRetryDelay.Milliseconds(), 10)
	if err := j.sess.publish("", c.topo.retry, msg); err != nil {
		// Not acknowledged: it comes back when the connection does.
		c.log.Warn("could not delay a gapped event; it stays unacknowledged", "event_id", ev.ID, "error", err)
		c.retryLater(j.d, c.cfg.GapRetryDelay)
		return
	}
	res.Outcome = Delayed
	res.Reason = fmt.Sprintf("version %d of %s/%s arrived before version %d (last applied %d); retrying in %s",
		ev.AggregateVersion, ev.AggregateType, ev.AggregateID, res.LastApplied+1, res.LastApplied, c.cfg.GapRetryDelay)
	c.observe(res)
	c.ack(j)
}

// park moves the delivery to <queue>.dlq with the reason in its headers,
// then acknowledges it. If the copy is not confirmed, the original is
// returned to the queue instead: it is never acknowledged unparked.
func (c *Consumer) park(j job, res Result, outcome Outcome, cause, reason string) {
	// The reason may quote the payload (a handler's or an upcaster's
	// error): mask it against the body as sent and as upcast.
	ev := res.Event
	reason = c.cfg.Redact.Text(ev.AggregateType, ev.EventType, j.d.Body, reason)
	reason = c.cfg.Redact.Text(ev.AggregateType, ev.EventType, ev.Payload, reason)
	res.Outcome, res.Reason, res.Cause = outcome, reason, cause
	msg := republish(j.d, amqp.Table{
		HeaderParkedReason:       reason,
		HeaderParkedCause:        cause,
		HeaderParkedBy:           c.cfg.Inbox.Consumer(),
		HeaderParkedAt:           time.Now().UTC().Truncate(time.Second),
		HeaderOriginalRoutingKey: originalRoutingKey(j.d),
	})
	if err := j.sess.publish(c.topo.dlx, originalRoutingKey(j.d), msg); err != nil {
		c.log.Error("could not park a message; returning it to the queue", "event_id", res.Event.ID, "reason", reason, "error", err)
		c.retryLater(j.d, c.cfg.RetryBackoff)
		return
	}
	c.observe(res)
	c.ack(j)
}

func (c *Consumer) ack(j job) {
	if err := j.d.Ack(false); err != nil {
		// The channel closed after the outcome was committed: the broker
		// redelivers, and the inbox recognises the event.
		c.log.Debug("ack failed; the delivery will come again", "event_id", j.d.MessageId, "error", err)
	}
}

func (c *Consumer) observe(res Result) {
	ev := res.Event
	attrs := []any{"outcome", string(res.Outcome), "event_id", ev.ID, "event_type", ev.EventType,
		"aggregate", ev.AggregateType + "/" + ev.AggregateID, "version", ev.AggregateVersion, "delivery", res.Deliveries}
	level := slog.LevelInfo
	switch res.Outcome {
	case Applied:
		c.stats.applied.Add(1)
		level = slog.LevelDebug
	case Duplicate:
		c.stats.duplicates.Add(1)
	case Stale:
		c.stats.stale.Add(1)
	case Delayed:
		c.stats.delayed.Add(1)
	case Retried:
		c.stats.retried.Add(1)
		level = slog.LevelWarn
	case Parked:
		c.stats.parked.Add(1)
		level = slog.LevelError
	case Quarantined:
		c.stats.quarantined.Add(1)
		level = slog.LevelError
	}
	if res.Reason != "" {
		attrs = append(attrs, "reason", res.Reason)
	}
	if res.Outcome == Parked || res.Outcome == Quarantined {
		attrs = append(attrs, "dead_letter_queue", c.topo.dlq)
	}
	c.log.Log(context.Background(), level, "event "+string(res.Outcome), attrs...)
	name := c.cfg.Inbox.Consumer()
	c.cfg.Metrics.Outcome(name, string(res.Outcome))
	switch res.Outcome {
	case Applied:
		// A delayed event lags from when it became due, not from its
		// commit: its delay is what the producer asked for.
		c.cfg.Metrics.Applied(name, later(ev.Timestamp, ev.DueAt))
	case Parked, Quarantined:
		c.cfg.Metrics.DeadLettered(name, res.Cause)
	}
	if c.cfg.OnResult != nil {
		c.cfg.OnResult(res)
	}
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// originalRoutingKey is the key the message was published with: a copy
// back from <queue>.retry arrives with the queue's name as its key.
func originalRoutingKey(d amqp.Delivery) string {
	if k, ok := d.Headers[HeaderOriginalRoutingKey].(string); ok && k != "" {
		return k
	}
	return d.RoutingKey
}

// republish copies d for publishing, with extra headers. The delivery
// count belongs to the queue the copy leaves, so it is dropped.
func republish(d amqp.Delivery, extra amqp.Table) amqp.Publishing {
	h := amqp.Table{}
	maps.Copy(h, d.Headers)
	delete(h, "x-delivery-count")
	maps.Copy(h, extra)
	return amqp.Publishing{
		Headers:         h,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// decode reads the event from Ferry's message properties and headers. A
// header that is present with the wrong type is an error; absent aggregate
// headers are left for the inbox to judge (an Unordered inbox needs none),
// and an absent schema version reads as 0, which the registry refuses.
func decode(d amqp.Delivery) (inbox.Event, error) {
	ev := inbox.Event{ID: d.MessageId, EventType: d.Type, Payload: d.Body, Timestamp: d.Timestamp, Headers: producerHeaders(d.Headers)}
	var bad []string
	str := func(name string, dst *string) {
		switch v := d.Headers[name].(type) {
		case nil:
		case string:
			*dst = v
		default:
			bad = append(bad, fmt.Sprintf("%s is a %T, not a string", name, v))
		}
	}
	str(broker.HeaderAggregateType, &ev.AggregateType)
	str(broker.HeaderAggregateID, &ev.AggregateID)
	if v, present := d.Headers[broker.HeaderAggregateVersion]; present {
		n, ok := toInt64(v)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s is a %T, not an integer", broker.HeaderAggregateVersion, v))
		}
		ev.AggregateVersion = n
	}
	if v, present := d.Headers[broker.HeaderSchemaVersion]; present {
		n, ok := toInt64(v)
		if !ok || n > 1<<31 {
			bad = append(bad, fmt.Sprintf("%s %v is not a schema version", broker.HeaderSchemaVersion, v))
		}
		ev.SchemaVersion = int(n)
	}
	switch v := d.Headers[broker.HeaderDueAt].(type) {
	case nil:
	case time.Time:
		ev.DueAt = v
	default:
		bad = append(bad, fmt.Sprintf("%s is a %T, not a timestamp", broker.HeaderDueAt, v))
	}
	if ev.ID == "" {
		bad = append(bad, "message_id is empty (Ferry sets it to the event id)")
	}
	if ev.EventType == "" {
		bad = append(bad, "type is empty (Ferry sets it to the event type)")
	}
	if len(bad) > 0 {
		return ev, fmt.Errorf("invalid Ferry message: %s", joinSemicolon(bad))
	}
	return ev, nil
}

// producerHeaders are the string headers of a message whose names a
// producer may set: not Ferry's, the broker's or the trace context.
func producerHeaders(h amqp.Table) map[string]string {
	var out map[string]string
	for k, v := range h {
		s, ok := v.(string)
		if !ok || outbox.CheckHeaderName(k) != nil {
			continue
		}
		if out == nil {
			out = make(map[string]string)
		}
		out[k] = s
	}
	return out
}

func joinSemicolon(s []string) string {
	out := s[0]
	for _, x := range s[1:] {
		out += "; " + x
	}
	return out
}

// toInt64 accepts the integer types an AMQP table decodes to.
func toInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int16:
		return int64(n), true
	case int8:
		return int64(n), true
	case int:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	}
	return 0, false
}

// deliveryCount is how often the queue has delivered the message before
// (quorum queues set x-delivery-count on redeliveries).
func deliveryCount(d amqp.Delivery) int {
	n, _ := toInt64(d.Headers["x-delivery-count"])
	return int(n)
}

// headerCarrier reads W3C trace headers from AMQP headers.
type headerCarrier amqp.Table

func (h headerCarrier) Get(key string) string {
	v, _ := h[key].(string)
	return v
}

func (h headerCarrier) Set(key, value string) { h[key] = value }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
