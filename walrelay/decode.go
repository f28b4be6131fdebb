package walrelay

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ferry-outbox/ferry/poller"
)

// txn is one committed transaction's outbox events that are deliverable at
// its commit, in insert order, and the LSN just past its commit record:
// confirming it tells PostgreSQL the transaction never needs to be sent
// again.
type txn struct {
	events []poller.Event
	end    pglogrepl.LSN
	// delayed counts the rows left out of events because their
	// deliver_after (migration 0009) was ahead of the commit: they stay
	// pending for the claim pass, which takes them when they are due.
	delayed int
	// unknown are the ids in events whose stream lacked deliver_after (a
	// publication of its own without it, or WAL written before it was
	// added): the relay looks their delay up before dispatching them.
	unknown []string

	rows []streamedRow // while open
}

// streamedRow is one decoded insert of an open transaction; whether it is
// deliverable is known only at its COMMIT, whose time decides (the
// database's clock, like the claim's now()).
type streamedRow struct {
	ev poller.Event
	// after is deliver_after; zero when NULL.
	after time.Time
	// known: the stream carries deliver_after.
	known bool
}

// relation is what a Relation message told about one table.
type relation struct {
	outbox bool
	cols   map[string]int // column name → position in a tuple
}

// delayColumn, when streamed, tells a delayed row from a deliverable one
// without asking the database.
const delayColumn = "deliver_after"

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
	// timestamps parses deliver_after (a pgtype.Map is not safe for
	// concurrent use: one per decoder, which one session owns).
	timestamps *pgtype.Map
}

func newDecoder(schema string) *decoder {
	return &decoder{schema: schema, relations: map[uint32]relation{}, timestamps: pgtype.NewMap()}
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
		row, relay, err := decodeInsert(r, m.Tuple, d.timestamps)
		if err != nil {
			return nil, err
		}
		if relay {
			d.open.rows = append(d.open.rows, row)
		}
	case *pglogrepl.CommitMessage:
		if d.open == nil {
			return nil, fmt.Errorf("%w: COMMIT outside a transaction", errProtocol)
		}
		t := d.open
		t.end = m.TransactionEndLSN
		for _, row := range t.rows {
			switch {
			case !row.known:
				t.events = append(t.events, row.ev)
				t.unknown = append(t.unknown, row.ev.ID)
			case row.after.After(m.CommitTime):
				t.delayed++
			default:
				t.events = append(t.events, row.ev)
			}
		}
		t.rows = nil
		d.open = nil
		return t, nil
	}
	return nil, nil
}

// inTransaction: a BEGIN was read and its COMMIT not yet.
func (d *decoder) inTransaction() bool { return d.open != nil }

// decodeInsert reads one outbox row from a tuple in pgoutput's text format.
// relay is false for a row inserted as anything but pending.
func decodeInsert(r relation, tuple *pglogrepl.TupleData, timestamps *pgtype.Map) (row streamedRow, relay bool, err error) {
	ev, relay, err := decodeEvent(r, tuple)
	if err != nil || !relay {
		return row, relay, err
	}
	row.ev = ev
	if _, row.known = r.cols[delayColumn]; !row.known {
		return row, true, nil
	}
	c := tuple.Columns[r.cols[delayColumn]]
	switch c.DataType {
	case pglogrepl.TupleDataTypeNull:
	case pglogrepl.TupleDataTypeText:
		// The replication connection asks for DateStyle ISO (stream).
		if err := timestamps.Scan(pgtype.TimestamptzOID, pgtype.TextFormatCode, c.Data, &row.after); err != nil {
			return row, false, fmt.Errorf("%w: outbox row %s: deliver_after %q: %w", errProtocol, ev.ID, c.Data, err)
		}
	default:
		return row, false, fmt.Errorf("%w: column %q in format %q, want text", errProtocol, delayColumn, c.DataType)
	}
	return row, true, nil
}

// decodeEvent reads the columns every relay needs.
func decodeEvent(r relation, tuple *pglogrepl.TupleData) (ev poller.Event, relay bool, err error) {
	if tuple == nil {
		return ev, false, fmt.Errorf("%w: INSERT without a tuple", errProtocol)
	}
	if i, ok := r.cols[delayColumn]; ok && i >= len(tuple.Columns) {
		return ev, false, fmt.Errorf("%w: tuple of %d columns, %q is column %d", errProtocol, len(tuple.Columns), delayColumn, i)
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
