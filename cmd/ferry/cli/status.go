package cli

import (
	"context"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"golang.org/x/term"

	"github.com/ferry-outbox/ferry/cmd/ferry/app"
	"github.com/ferry-outbox/ferry/cmd/ferry/status"
	"github.com/ferry-outbox/ferry/codec"
)

func statusCmd(g *globals) *cobra.Command {
	return reportCmd(g, "status", "One screen: backlog, throughput, blocked aggregates with repair commands, effects waiting on reconciliation, maintenance runs", "print JSON (durations in nanoseconds)",
		collectStatus, func(w io.Writer, _ app.Config, snap status.Snapshot) error {
			f, isFile := w.(*os.File)
			status.Render(w, snap, isFile && term.IsTerminal(int(f.Fd())))
			return nil
		})
}

// collectStatus reads what `ferry status` shows.
func collectStatus(ctx context.Context, cfg app.Config, pool *pgxpool.Pool, c client.Client) (status.Snapshot, error) {
	// Memos are sealed by the payload codec when one is set.
	var dc converter.DataConverter
	cdc, err := cfg.Codec()
	if err != nil {
		return status.Snapshot{}, err
	}
	if cdc != nil {
		dc = codec.DataConverter(cdc)
	}
	snap, err := status.Collect(ctx, pool, c, dc, cfg.Namespace, cfg.TaskQueue)
	if err != nil {
		return status.Snapshot{}, err
	}
	if snap.WALSlot, err = status.CollectWALSlot(ctx, pool, cfg.WALSlot); err != nil {
		return status.Snapshot{}, err
	}
	if snap.Temporal, err = status.CollectTemporal(ctx, c.WorkflowService(), cfg.Temporal.Address); err != nil {
		return status.Snapshot{}, err
	}
	return snap, nil
}
