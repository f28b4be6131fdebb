package status

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-outbox/ferry/walrelay"
)

// WALSlot is the log-tailing relay's replication slot (--source wal).
type WALSlot struct {
	Name string `json:"name"`
	// Active: a relay streams from it (ActivePID is its walsender).
	Active    bool `json:"active"`
	ActivePID int  `json:"active_pid,omitempty"`
	// RetainedBytes is WAL PostgreSQL keeps on disk for the slot;
	// LagBytes is WAL written since the relay last confirmed.
	RetainedBytes int64 `json:"retained_bytes"`
	LagBytes      int64 `json:"lag_bytes"`
}

// CollectWALSlot reads the slot named slot; nil when there is none (a
// polling deployment), so status shows it only where it exists, a slot
// left behind after going back to polling included.
func CollectWALSlot(ctx context.Context, pool *pgxpool.Pool, slot string) (*WALSlot, error) {
	s, err := walrelay.ReadSlotStats(ctx, pool, slot)
	if err != nil || !s.Exists {
		return nil, err
	}
	return &WALSlot{Name: slot, Active: s.Active, ActivePID: s.ActivePID, RetainedBytes: s.RetainedBytes, LagBytes: s.LagBytes}, nil
}

// render writes the slot's section; nothing for a nil slot.
func (s *WALSlot) render(w io.Writer, bold, red, reset string) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "\n%sLog tailing%s (replication slot %s)\n", bold, reset, s.Name)
	if s.Active {
		fmt.Fprintf(w, "  streaming (walsender PID %d): %s of WAL not yet confirmed, %s retained\n", s.ActivePID, bytesText(s.LagBytes), bytesText(s.RetainedBytes))
		return
	}
	fmt.Fprintf(w, "  %snobody streams from it%s: %s of WAL retained, growing with every write to the database\n", red, reset, bytesText(s.RetainedBytes))
	fmt.Fprintf(w, "    start the relay:          ferry poller --source wal\n")
	fmt.Fprintf(w, "    or, back to polling:      ferry wal drop-slot --wal-slot %s\n", s.Name)
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
