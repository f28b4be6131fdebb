package broker

// The message contract between the relay and its consumers: the AMQP
// headers Ferry sets on every message it publishes (package activities
// writes them, package consumer reads them). The event id is the
// message_id property and the event type the type property; these carry the
// rest. A rename here is a wire change for every consumer in production.
const (
	// HeaderAggregateType (string) is the event's aggregate_type.
	HeaderAggregateType = "ferry-aggregate-type"
	// HeaderAggregateID (string) is the event's aggregate_id.
	HeaderAggregateID = "ferry-aggregate-id"
	// HeaderAggregateVersion (int64) is the event's aggregate_version:
	// consumers apply an aggregate's events in this order.
	HeaderAggregateVersion = "ferry-aggregate-version"
	// HeaderSchemaVersion (int64) is the payload's schema version (package
	// upcast reads it).
	HeaderSchemaVersion = "ferry-schema-version"
	// HeaderDueAt (AMQP timestamp, whole seconds) is set on a delayed event
	// only (outbox.Event.DeliverAfter later than its commit): when it
	// became deliverable. A consumer's lag counts from it, not from the
	// message's timestamp (the commit).
	HeaderDueAt = "ferry-due-at"
	// HeaderTraceParent and HeaderTraceState are the W3C trace context of
	// the publish span, when there is one.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)
