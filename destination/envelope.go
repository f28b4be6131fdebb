package destination

import (
	"encoding/json"
	"fmt"
	"time"
)

// EnvelopeVersion is the version of the Envelope's shape. Fields are only
// ever added within a version; a change a reader must know about (a field
// renamed, removed or changed in meaning) comes with a new version.
const EnvelopeVersion = 1

// Envelope is what a workflow destination receives: a started workflow as
// its one input, a signalled one as the signal's one argument. Its JSON
// shape (the field tags) is the contract for workflows written with other
// Temporal SDKs; Ferry encodes it with Temporal's default data converter,
// so it travels as a json/plain payload.
type Envelope struct {
	// EnvelopeVersion is the shape's version (EnvelopeVersion, today 1).
	EnvelopeVersion int `json:"envelope_version"`
	// Destination is the route's name that delivered it, e.g. "fulfilment".
	Destination string `json:"destination"`
	// EventID is the event's identity (a UUID): the same as the broker's
	// message id, stable across every repeat.
	EventID string `json:"event_id"`
	// EventType, e.g. "paid".
	EventType string `json:"event_type"`
	// AggregateType and AggregateID name the entity, e.g. "order", "o-17".
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	// AggregateVersion is the event's position in its aggregate, 1, 2, 3…
	// Ferry delivers each aggregate's versions to each destination in this
	// order.
	AggregateVersion int64 `json:"aggregate_version"`
	// SchemaVersion of Payload: the version it was written with, or the
	// version the worker's upcasters lifted it to.
	SchemaVersion int `json:"schema_version"`
	// Payload is the event's JSON document.
	Payload json.RawMessage `json:"payload"`
	// Headers the producer attached to the event; absent when none.
	Headers map[string]string `json:"headers,omitempty"`
	// TraceParent and TraceState are the W3C trace context of the
	// transaction that wrote the event; absent when it had none.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// CreatedAt is when the event was written (the row's created_at).
	CreatedAt time.Time `json:"created_at"`
}

// Aggregate is "<aggregate_type>/<aggregate_id>", the key Dedup orders by.
func (e Envelope) Aggregate() string {
	return e.AggregateType + "/" + e.AggregateID
}

// Decode unmarshals the payload into v.
func (e Envelope) Decode(v any) error {
	if err := json.Unmarshal(e.Payload, v); err != nil {
		return fmt.Errorf("decode payload of event %s (%s v%d): %w", e.EventID, e.EventType, e.SchemaVersion, err)
	}
	return nil
}
