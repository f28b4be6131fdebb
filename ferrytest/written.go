package ferrytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Queryer is what the reads need: a pgx.Tx (it sees what the transaction
// wrote so far, committed or not), a *pgxpool.Pool or a *pgx.Conn (they
// see what is committed).
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Event is an outbox row as a test reads it.
type Event struct {
	ID                         uuid.UUID
	AggregateType, AggregateID string
	Version                    int64
	EventType                  string
	SchemaVersion              int
	// Payload is the JSON document as jsonb stores it.
	Payload json.RawMessage
	// Headers are the producer's (outbox.Event.Headers); nil for none.
	Headers map[string]string
	// DeliverAfter is zero for an event due at once.
	DeliverAfter time.Time
	// Status is pending, dispatched, published, quarantined or skipped;
	// LastError is empty when the row has none.
	Status, LastError string
	CreatedAt         time.Time
}

func (e Event) String() string {
	return fmt.Sprintf("%s/%s %s v%d", e.AggregateType, e.AggregateID, e.EventType, e.Version)
}

// sqlWritten reads every outbox row visible to the caller, in the order
// RequireManyWritten expects them: by transaction (created_at is the
// transaction's start), then aggregate and version.
const sqlWritten = `
SELECT id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload::text,
       coalesce(headers::text, ''), coalesce(deliver_after, 'epoch'::timestamptz), status, coalesce(last_error, ''), created_at
FROM outbox_events
WHERE $1::uuid[] IS NULL OR id = ANY($1::uuid[])
ORDER BY created_at, aggregate_type, aggregate_id, aggregate_version`

// Written reads the outbox events db sees (a transaction: what it wrote,
// and what others committed), ordered by transaction, aggregate and
// version.
func Written(ctx context.Context, tb testing.TB, db Queryer) []Event {
	tb.Helper()
	events, err := read(ctx, db, nil)
	if err != nil {
		tb.Fatalf("ferrytest: %v", err)
	}
	return events
}

func read(ctx context.Context, db Queryer, ids []uuid.UUID) ([]Event, error) {
	rows, err := db.Query(ctx, sqlWritten, ids)
	if err != nil {
		return nil, fmt.Errorf("read outbox_events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		var payload, headers string
		err := r.Scan(&e.ID, &e.AggregateType, &e.AggregateID, &e.Version, &e.EventType, &e.SchemaVersion, &payload,
			&headers, &e.DeliverAfter, &e.Status, &e.LastError, &e.CreatedAt)
		e.Payload = json.RawMessage(payload)
		if headers != "" {
			_ = json.Unmarshal([]byte(headers), &e.Headers) // the schema checks it is an object of strings
		}
		if e.DeliverAfter.Equal(time.Unix(0, 0)) {
			e.DeliverAfter = time.Time{}
		}
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox_events: %w", err)
	}
	return events, nil
}

// Expected is an event a test expects to have been written. AggregateType
// and EventType name it; the other fields, when set, must match too.
type Expected struct {
	AggregateType string
	// AggregateID: "" matches any.
	AggregateID string
	EventType   string
	// Version: 0 matches any.
	Version int64
	// Payload, when not nil, must equal the event's as a JSON document
	// (key order and spacing aside): json.RawMessage, []byte and string
	// are JSON text, anything else is marshalled with encoding/json.
	Payload any
	// SchemaVersion: 0 is not compared.
	SchemaVersion int
	// Headers, when not nil, must equal the event's (an empty map: none).
	Headers map[string]string
}

func (x Expected) String() string {
	s := x.AggregateType + "/" + x.AggregateID + " " + x.EventType
	if x.AggregateID == "" {
		s = x.AggregateType + "/* " + x.EventType
	}
	if x.Version > 0 {
		s += fmt.Sprintf(" v%d", x.Version)
	}
	return s
}

// names says whether e is the event x names (its type, event type, and
// id and version when x has them).
func (x Expected) names(e Event) bool {
	return e.AggregateType == x.AggregateType && e.EventType == x.EventType &&
		(x.AggregateID == "" || e.AggregateID == x.AggregateID) && (x.Version == 0 || e.Version == x.Version)
}

// differences lists what of e differs from x's other fields, each as
// "Field: want …, written …".
func (x Expected) differences(e Event) []string {
	var out []string
	if x.Payload != nil {
		want, err := jsonText(x.Payload)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("Payload: the expected payload is no JSON document: %v", err))
		case !sameJSON(want, e.Payload):
			out = append(out, fmt.Sprintf("Payload: want %s, written %s", compact(want), compact(e.Payload)))
		}
	}
	if x.SchemaVersion != 0 && x.SchemaVersion != e.SchemaVersion {
		out = append(out, fmt.Sprintf("SchemaVersion: want %d, written %d", x.SchemaVersion, e.SchemaVersion))
	}
	if x.Headers != nil && !maps.Equal(x.Headers, e.Headers) {
		out = append(out, fmt.Sprintf("Headers: want %s, written %s", headerText(x.Headers), headerText(e.Headers)))
	}
	return out
}

// RequireWritten requires that db sees exactly one outbox event that want
// names (RequireManyWritten checks several), with want's payload, schema
// version and headers where set, and returns it. Pass the handler's
// transaction to see what it wrote before it commits. On failure the test
// stops with a message naming the event and each field that differed, or
// listing the events that were written.
func RequireWritten(ctx context.Context, tb testing.TB, db Queryer, want Expected) Event {
	tb.Helper()
	return requireWritten(ctx, tb, db, want)
}

// testingT is the part of testing.TB the assertions use, so that their own
// tests can record a failure.
type testingT interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
}

func requireWritten(ctx context.Context, t testingT, db Queryer, want Expected) Event {
	t.Helper()
	events, err := read(ctx, db, nil)
	if err != nil {
		fail(t, "%v", err)
		return Event{}
	}
	var named []Event
	for _, e := range events {
		if want.names(e) {
			named = append(named, e)
		}
	}
	switch len(named) {
	case 0:
		fail(t, "no event %s was written; written: %s", want, list(events))
		return Event{}
	case 1:
	default:
		fail(t, "%d events %s were written (%s): name one (AggregateID, Version), or use RequireManyWritten", len(named), want, list(named))
		return Event{}
	}
	if diff := want.differences(named[0]); len(diff) > 0 {
		fail(t, "event %s (%s) differs:\n      %s", named[0], named[0].ID, strings.Join(diff, "\n      "))
		return Event{}
	}
	return named[0]
}

// RequireManyWritten requires that the outbox events db sees are exactly
// want: each names one event (and matches it where it sets more), no event
// is left over, and the events of one aggregate are expected in version
// order. It returns them in want's order. On failure the test stops with a
// message naming the expectation that failed and what was written.
func RequireManyWritten(ctx context.Context, tb testing.TB, db Queryer, want []Expected) []Event {
	tb.Helper()
	return requireManyWritten(ctx, tb, db, want)
}

func requireManyWritten(ctx context.Context, t testingT, db Queryer, want []Expected) []Event {
	t.Helper()
	events, err := read(ctx, db, nil)
	if err != nil {
		fail(t, "%v", err)
		return nil
	}
	used := make([]bool, len(events))
	out := make([]Event, 0, len(want))
	last := map[string]Event{} // per aggregate, the event the previous expectation matched
	for i, w := range want {
		at := -1
		for j, e := range events {
			if !used[j] && w.names(e) {
				at = j
				break
			}
		}
		if at < 0 {
			fail(t, "expected event %d of %d, %s, was not written; written: %s", i+1, len(want), w, list(events))
			return nil
		}
		e := events[at]
		used[at] = true
		key := e.AggregateType + "/" + e.AggregateID
		if prev, ok := last[key]; ok && e.Version < prev.Version {
			fail(t, "expected event %d of %d, %s, after %s, but it was written before it (v%d < v%d): expect an aggregate's events in version order",
				i+1, len(want), e, prev, e.Version, prev.Version)
			return nil
		}
		last[key] = e
		if diff := w.differences(e); len(diff) > 0 {
			fail(t, "expected event %d of %d, %s (%s), differs:\n      %s", i+1, len(want), e, e.ID, strings.Join(diff, "\n      "))
			return nil
		}
		out = append(out, e)
	}
	var extra []Event
	for i, e := range events {
		if !used[i] {
			extra = append(extra, e)
		}
	}
	if len(extra) > 0 {
		fail(t, "%d events were written that were not expected: %s", len(extra), list(extra))
		return nil
	}
	return out
}

// WaitPublished waits until the outbox rows of ids are all published
// (the broker confirmed them), polling db until timeout, and returns them
// in ids' order. On timeout the test stops with a message giving each
// unpublished event's status and last error. The relay is the caller's:
// relaytest.Start's, or one in another process.
func WaitPublished(tb testing.TB, db Queryer, timeout time.Duration, ids ...uuid.UUID) []Event {
	tb.Helper()
	return waitPublished(tb, db, timeout, ids)
}

func waitPublished(t testingT, db Queryer, timeout time.Duration, ids []uuid.UUID) []Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// Each read has a deadline of its own: a stuck query must not
		// outlast the wait.
		ctx, cancel := context.WithTimeout(context.Background(), max(time.Until(deadline), time.Second))
		events, err := read(ctx, db, ids)
		cancel()
		if err != nil {
			fail(t, "%v", err)
			return nil
		}
		byID := make(map[uuid.UUID]Event, len(events))
		for _, e := range events {
			byID[e.ID] = e
		}
		var waiting []string
		out := make([]Event, 0, len(ids))
		for _, id := range ids {
			e, ok := byID[id]
			switch {
			case !ok:
				waiting = append(waiting, fmt.Sprintf("%s: no such event in outbox_events", id))
			case e.Status != "published":
				w := fmt.Sprintf("%s (%s): %s", id, e, e.Status)
				if e.LastError != "" {
					w += ", last error: " + e.LastError
				}
				waiting = append(waiting, w)
			}
			out = append(out, e)
		}
		if len(waiting) == 0 {
			return out
		}
		if time.Now().After(deadline) {
			fail(t, "%d of %d events not published within %s:\n      %s", len(waiting), len(ids), timeout, strings.Join(waiting, "\n      "))
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fail stops the test with a message of ferrytest's.
func fail(t testingT, format string, args ...any) {
	t.Helper()
	t.Errorf("\n    ferrytest: "+format+"\n", args...)
	t.FailNow()
}

func list(events []Event) string {
	if len(events) == 0 {
		return "none"
	}
	s := make([]string, len(events))
	for i, e := range events {
		s[i] = e.String()
	}
	return strings.Join(s, ", ")
}

// jsonText is an expected payload as JSON text.
func jsonText(v any) ([]byte, error) {
	var b []byte
	switch p := v.(type) {
	case json.RawMessage:
		b = p
	case []byte:
		b = p
	case string:
		b = []byte(p)
	default:
		return json.Marshal(v)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%q is not valid JSON", b)
	}
	return b, nil
}

func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

func headerText(h map[string]string) string {
	if len(h) == 0 {
		return "none"
	}
	b, _ := json.Marshal(h) // sorted keys
	return string(b)
}
