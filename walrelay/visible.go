package walrelay

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-outbox/ferry/poller"
)

// PostgreSQL streams a transaction once its commit record is flushed, but
// other sessions see its rows only once it has left the running
// transactions, a moment later. The moment is short unless the committing
// session waits in between: for a synchronous standby (synchronous_commit
// on, remote_write or remote_apply), the standby's round trip. A streamed
// row handed to Temporal within that moment can be read by its workflow
// before it is visible (no row: the event is quarantined as missing), and
// the mark that follows the dispatch misses it and leaves it pending, to be
// claimed and signalled again by the catch-up pass. So the stream hands a
// row on only once another session sees it.

// defaultVisibleTimeout bounds the wait for streamed rows to become
// visible. A row still invisible then (a synchronous standby that does not
// answer holds its commit) is left to the catch-up pass, which claims it
// once it is visible: the stream does not stop for it. The wait stays well
// below dispatchTimeout and wal_sender_timeout (60s by default): the stream
// is not read meanwhile.
const defaultVisibleTimeout = 10 * time.Second

// sqlVisible picks, of streamed rows, those this session sees.
const sqlVisible = `SELECT id::text FROM outbox_events WHERE id = ANY($1::uuid[])`

// onlyVisible waits until another session sees every row of events, at
// most r.visibleTimeout, and returns the events whose rows it sees. Almost
// always they are all visible at the first look: one indexed query per
// flush. An error ends the session: its transactions are replayed.
func (r *Relay) onlyVisible(ctx context.Context, events []poller.Event) ([]poller.Event, error) {
	if len(events) == 0 {
		return events, nil
	}
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	deadline := time.Now().Add(r.visibleTimeout)
	wait := time.Millisecond
	for {
		rows, err := r.cfg.Pool.Query(ctx, sqlVisible, ids)
		if err != nil {
			return nil, fmt.Errorf("look up streamed rows: %w", err)
		}
		seen, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("look up streamed rows: %w", err)
		}
		if len(seen) == len(ids) {
			return events, nil
		}
		if !time.Now().Before(deadline) {
			visible := make(map[string]bool, len(seen))
			for _, id := range seen {
				visible[id] = true
			}
			var out []poller.Event
			for _, e := range events {
				if visible[strings.ToLower(e.ID)] {
					out = append(out, e)
				}
			}
			r.log.Warn("streamed rows are still not visible to other sessions (a synchronous standby holding their commit?); the stream moves on and the catch-up pass delivers them once they are",
				"invisible", len(events)-len(out), "waited", r.visibleTimeout, "first_invisible", firstMissing(events, visible))
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(wait, time.Until(deadline))):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

func firstMissing(events []poller.Event, visible map[string]bool) string {
	for _, e := range events {
		if !visible[strings.ToLower(e.ID)] {
			return e.ID
		}
	}
	return ""
}
