package walrelay

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/poller"
)

// relMsg is the Relation message of a table with the given columns.
func relMsg(id uint32, schema, table string, cols ...string) *pglogrepl.RelationMessage {
	m := &pglogrepl.RelationMessage{RelationID: id, Namespace: schema, RelationName: table, ColumnNum: uint16(len(cols))}
	for _, c := range cols {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: c})
	}
	return m
}

// insMsg is an Insert of values in text format; "<null>" is NULL.
func insMsg(rel uint32, values ...string) *pglogrepl.InsertMessage {
	tuple := &pglogrepl.TupleData{ColumnNum: uint16(len(values))}
	for _, v := range values {
		c := &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v), Length: uint32(len(v))}
		if v == "<null>" {
			c = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
		}
		tuple.Columns = append(tuple.Columns, c)
	}
	return &pglogrepl.InsertMessage{RelationID: rel, Tuple: tuple}
}

func TestDecoderAssemblesTransactions(t *testing.T) {
	t.Parallel()
	outbox := relMsg(1, "app", "outbox_events", streamedColumns...)
	// Columns in another order, as a publication of the user's own may send.
	reordered := relMsg(1, "app", "outbox_events", "status", "event_type", "aggregate_version", "aggregate_id", "aggregate_type", "id")
	other := relMsg(2, "app", "orders", "id", "note")
	elsewhere := relMsg(3, "other_schema", "outbox_events", streamedColumns...)
	ev := func(id, agg string, v int64) poller.Event {
		return poller.Event{ID: id, AggregateType: "order", AggregateID: agg, EventType: "changed", Version: v}
	}
	tests := []struct {
		name    string
		msgs    []pglogrepl.Message
		want    [][]poller.Event // per committed transaction
		wantErr string
		// delayed and unknown per committed transaction, when set.
		delayed []int
		unknown [][]string
	}{
		{
			name: "one transaction, two aggregates, other tables ignored",
			msgs: []pglogrepl.Message{
				&pglogrepl.BeginMessage{}, outbox, other,
				insMsg(2, "o1", "note"),
				insMsg(1, "e1", "order", "a", "1", "changed", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "<null>", "pending", "<null>"),
				insMsg(1, "e2", "order", "b", "1", "changed", "<null>", "<null>", "pending", "<null>"),
				&pglogrepl.CommitMessage{TransactionEndLSN: 100},
			},
			want: [][]poller.Event{{
				{ID: "e1", AggregateType: "order", AggregateID: "a", EventType: "changed", Version: 1, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
				ev("e2", "b", 1),
			}},
		},
		{
			name: "two transactions; a row inserted as published is not relayed; an empty transaction still commits",
			msgs: []pglogrepl.Message{
				&pglogrepl.BeginMessage{}, outbox,
				insMsg(1, "e1", "order", "a", "1", "changed", "<null>", "<null>", "pending", "<null>"),
				insMsg(1, "e2", "order", "a", "2", "changed", "<null>", "<null>", "published", "<null>"),
				&pglogrepl.CommitMessage{TransactionEndLSN: 100},
				&pglogrepl.BeginMessage{}, &pglogrepl.CommitMessage{TransactionEndLSN: 200},
			},
			want: [][]poller.Event{{ev("e1", "a", 1)}, nil},
		},
		{
			name: "columns by name, not position; no status column",
			msgs: []pglogrepl.Message{
				&pglogrepl.BeginMessage{}, reordered,
				insMsg(1, "pending", "changed", "7", "a", "order", "e7"),
				&pglogrepl.CommitMessage{TransactionEndLSN: 100},
			},
			want:    [][]poller.Event{{ev("e7", "a", 7)}},
			delayed: []int{0},
			unknown: [][]string{{"e7"}}, // no deliver_after: the relay asks the database
		},
		{
			name: "a row due after its commit is left out, one due by then is streamed",
			msgs: []pglogrepl.Message{
				&pglogrepl.BeginMessage{}, outbox,
				insMsg(1, "e1", "order", "a", "1", "changed", "<null>", "<null>", "pending", "2026-12-01 10:00:05.25+00"),
				insMsg(1, "e2", "order", "b", "1", "changed", "<null>", "<null>", "pending", "2026-12-01 11:59:59.999999+01:30"),
				insMsg(1, "e3", "order", "c", "1", "changed", "<null>", "<null>", "pending", "2026-12-01 10:00:05+00"),
				&pglogrepl.CommitMessage{TransactionEndLSN: 100, CommitTime: time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC)},
			},
			want:    [][]poller.Event{{ev("e3", "c", 1)}},
			delayed: []int{2},
			unknown: [][]string{nil},
		},
		{
			name:    "a deliver_after that is not a time",
			msgs:    []pglogrepl.Message{&pglogrepl.BeginMessage{}, outbox, insMsg(1, "e1", "order", "a", "1", "changed", "<null>", "<null>", "pending", "soon")},
			wantErr: `deliver_after "soon"`,
		},
		{
			name: "the outbox of another schema is not ours",
			msgs: []pglogrepl.Message{
				&pglogrepl.BeginMessage{}, elsewhere,
				insMsg(3, "e1", "order", "a", "1", "changed", "<null>", "<null>", "pending", "<null>"),
				&pglogrepl.CommitMessage{TransactionEndLSN: 100},
			},
			want: [][]poller.Event{nil},
		},
		{
			name:    "a column list without aggregate_version",
			msgs:    []pglogrepl.Message{&pglogrepl.BeginMessage{}, relMsg(1, "app", "outbox_events", "id", "aggregate_type", "aggregate_id", "event_type")},
			wantErr: `lacks column "aggregate_version"`,
		},
		{
			name:    "a version that is not a number",
			msgs:    []pglogrepl.Message{&pglogrepl.BeginMessage{}, outbox, insMsg(1, "e1", "order", "a", "x", "changed", "<null>", "<null>", "pending", "<null>")},
			wantErr: `aggregate_version "x"`,
		},
		{
			name:    "a NULL id",
			msgs:    []pglogrepl.Message{&pglogrepl.BeginMessage{}, outbox, insMsg(1, "<null>", "order", "a", "1", "changed", "<null>", "<null>", "pending", "<null>")},
			wantErr: "without id",
		},
		{
			name:    "an insert into a relation never described",
			msgs:    []pglogrepl.Message{&pglogrepl.BeginMessage{}, insMsg(9, "x")},
			wantErr: "before its RELATION message",
		},
		{
			name:    "a commit without a begin",
			msgs:    []pglogrepl.Message{&pglogrepl.CommitMessage{}},
			wantErr: "COMMIT outside a transaction",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := newDecoder("app")
			var got [][]poller.Event
			var delayed []int
			var unknown [][]string
			var ends []pglogrepl.LSN
			var err error
			for _, m := range tt.msgs {
				var tx *txn
				if tx, err = d.feed(m); err != nil {
					break
				}
				if tx != nil {
					got = append(got, tx.events)
					delayed = append(delayed, tx.delayed)
					unknown = append(unknown, tx.unknown)
					ends = append(ends, tx.end)
				}
			}
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			if tt.delayed != nil {
				require.Equal(t, tt.delayed, delayed, "rows left to the claim pass")
				require.Equal(t, tt.unknown, unknown, "rows whose delay the relay looks up")
			}
			require.False(t, d.inTransaction())
			for i := 1; i < len(ends); i++ {
				require.Greater(t, ends[i], ends[i-1], "transactions in commit order")
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"defaults", Config{}, ""},
		{"custom names", Config{Slot: "ferry_orders_2", Publication: "_pub"}, ""},
		{"63 bytes", Config{Slot: strings.Repeat("a", 63)}, ""},
		{"64 bytes", Config{Slot: strings.Repeat("a", 64)}, "Config.Slot"},
		{"upper case", Config{Slot: "Ferry"}, "Config.Slot"},
		{"leading digit", Config{Publication: "1pub"}, "Config.Publication"},
		{"quote", Config{Publication: `p"; DROP TABLE x; --`}, "Config.Publication"},
		{"hyphen", Config{Slot: "ferry-outbox"}, "Config.Slot"},
		{"catch-up too often", Config{CatchUpInterval: 10 * time.Millisecond}, "Config.CatchUpInterval"},
		{"status beyond wal_sender_timeout", Config{StatusInterval: time.Minute}, "Config.StatusInterval"},
		{"batch too large", Config{BatchEvents: 1_000_000}, "Config.BatchEvents"},
		{"negative wait", Config{BatchWait: -time.Millisecond}, "Config.BatchWait"},
		{"standby retry too eager", Config{StandbyRetry: time.Millisecond}, "Config.StandbyRetry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestNewRequiresDependencies(t *testing.T) {
	t.Parallel()
	_, err := New(Config{})
	require.ErrorContains(t, err, "Config.Pool")
}
