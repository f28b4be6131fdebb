package status

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRenderWALSlot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		slot *WALSlot
		want string
	}{
		{"no slot: polling", nil, ""},
		{"streaming", &WALSlot{Name: "ferry_outbox", Active: true, ActivePID: 4242, LagBytes: 56, RetainedBytes: 3 << 20},
			"\nLog tailing (replication slot ferry_outbox)\n  streaming (walsender PID 4242): 56 B of WAL not yet confirmed, 3.0 MiB retained\n"},
		{"left behind", &WALSlot{Name: "orders", RetainedBytes: 5 << 30},
			"\nLog tailing (replication slot orders)\n  nobody streams from it: 5.0 GiB of WAL retained, growing with every write to the database\n" +
				"    start the relay:          ferry poller --source wal\n" +
				"    or, back to polling:      ferry wal drop-slot --wal-slot orders\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			tt.slot.render(&buf, "", "", "")
			require.Equal(t, tt.want, buf.String())
		})
	}
}
