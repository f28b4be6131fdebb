package walrelay

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/ferry-outbox/ferry/poller"
)

// txn is one committed transaction's outbox events, in insert order, and
// the LSN just past its commit record: confirming it tells PostgreSQL the
// transaction never needs to be sent again.
type txn struct {
	events []poller.Event
	end    pglogrepl.LSN
}

// relation is what a Relation message told about one table.
type relation struct {
	outbox bool
	cols   map[string]int // column name → position in a tuple
}

// requiredColumns must be in the stream for an outbox insert to be
// dispatched.
var requiredColumns = []string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "event_type"}

// decoder assembles pgoutput messages (protocol version 1: whole
// transactions, in commit order) into transactions of outbox events. Inserts
// into other tables (a publication of the user's own) are ignored, and so
// are rows inserted with a status other than pending (nothing to relay).
type decoder struct {
	schema    string // the outbox's schema
	relations map[uint32]relation
	open      *txn
}

func newDecoder(schema string) *decoder {
	return &decoder{schema: schema, relations: map[uint32]relation{}}
}

// errProtocol marks a stream that broke pgoutput's rules; the relay
// reconnects and replays from its confirmed position.
var errProtocol = errors.New("unexpected pgoutput stream")

// feed takes one message; it returns the transaction that msg committed,
// else nil.
func (d *decoder) feed(msg pglogrepl.Message) (*txn, error) {
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		if d.open != nil {
			return nil, fmt.Errorf("%w: BEGIN inside a transaction", errProtocol)
		}
		d.open = &txn{}
	case *pglogrepl.RelationMessage:
		r := relation{outbox: m.Namespace == d.schema && m.RelationName == "outbox_events", cols: map[string]int{}}
		for i, c := range m.Columns {
			r.cols[c.Name] = i
		}
		if r.outbox {
			for _, c := range requiredColumns {
				if _, ok := r.cols[c]; !ok {
					return nil, fmt.Errorf("the stream of %s.outbox_events lacks column %q: the publication's column list must include %v", d.schema, c, streamedColumns)
				}
			}
		}
		d.relations[m.RelationID] = r
	case *pglogrepl.InsertMessage:
		if d.open == nil {
			return nil, fmt.Errorf("%w: INSERT outside a transaction", errProtocol)
		}
		r, ok := d.relations[m.RelationID]
		if !ok {
			return nil, fmt.Errorf("%w: INSERT into relation %d before its RELATION message", errProtocol, m.RelationID)
		}
		if !r.outbox {
			return nil, nil
		}
		ev, relay, err := decodeInsert(r, m.Tuple)
		if err != nil {
			return nil, err
		}
		if relay {
			d.open.events = append(d.open.events, ev)
		}
	case *pglogrepl.CommitMessage:
		if d.open == nil {
			return nil, fmt.Errorf("%w: COMMIT outside a transaction", errProtocol)
		}
		t := d.open
		t.end = m.TransactionEndLSN
		d.open = nil
		return t, nil
	}
	return nil, nil
}

// inTransaction: a BEGIN was read and its COMMIT not yet.
func (d *decoder) inTransaction() bool { return d.open != nil }

// decodeInsert reads one outbox row from a tuple in pgoutput's text format.
// relay is false for a row inserted as anything but pending.
func decodeInsert(r relation, tuple *pglogrepl.TupleData) (ev poller.Event, relay bool, err error) {
	if tuple == nil {
		return ev, false, fmt.Errorf("%w: INSERT without a tuple", errProtocol)
	}
	text := func(name string) (string, bool, error) {
		i, ok := r.cols[name]
		if !ok {
			return "", false, nil
		}
		if i >= len(tuple.Columns) {
			return "", false, fmt.Errorf("%w: tuple of %d columns, %q is column %d", errProtocol, len(tuple.Columns), name, i)
		}
		c := tuple.Columns[i]
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			return "", false, nil
		case pglogrepl.TupleDataTypeText:
			return string(c.Data), true, nil
		default:
			return "", false, fmt.Errorf("%w: column %q in format %q, want text", errProtocol, name, c.DataType)
		}
	}
	if status, ok, err := text("status"); err != nil {
		return ev, false, err
	} else if ok && status != "pending" {
		return ev, false, nil
	}
	fields := []struct {
		name     string
		dst      *string
		required bool
	}{
		{"id", &ev.ID, true},
		{"aggregate_type", &ev.AggregateType, true},
		{"aggregate_id", &ev.AggregateID, true},
		{"event_type", &ev.EventType, true},
		{"trace_parent", &ev.TraceParent, false},
		{"trace_state", &ev.TraceState, false},
	}
	for _, f := range fields {
		v, ok, err := text(f.name)
		if err != nil {
			return ev, false, err
		}
		if !ok && f.required {
			return ev, false, fmt.Errorf("%w: outbox row without %s", errProtocol, f.name)
		}
		*f.dst = v
	}
	v, ok, err := text("aggregate_version")
	if err != nil {
		return ev, false, err
	}
	if !ok {
		return ev, false, fmt.Errorf("%w: outbox row %s without aggregate_version", errProtocol, ev.ID)
	}
	if ev.Version, err = strconv.ParseInt(v, 10, 64); err != nil {
		return ev, false, fmt.Errorf("%w: outbox row %s: aggregate_version %q: %w", errProtocol, ev.ID, v, err)
	}
	return ev, true, nil
}
