package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/ferry-outbox/ferry/cmd/ferry/app"
	"github.com/ferry-outbox/ferry/walrelay"
)

func walCmd(g *globals) *cobra.Command {
	wal := &cobra.Command{
		Use:   "wal",
		Short: "The replication slot of the log-tailing relay (--source wal)",
		Args:  cobra.NoArgs,
	}
	wal.AddCommand(&cobra.Command{
		Use:   "drop-slot",
		Short: "Drop the replication slot and the publication of --source wal, when going back to polling",
		Long: `Drops the replication slot (--wal-slot) and the publication (--wal-publication).
A slot nobody reads keeps PostgreSQL's write-ahead log on disk without end: drop it
once no process runs with --source wal. It refuses while a relay streams from the
slot. Rows still pending are delivered by ferry poller --source poll.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withPool(cmd.Context(), func(ctx context.Context, cfg app.Config, pool *pgxpool.Pool) error {
				slot, pub, err := walrelay.DropSlot(ctx, pool, cfg.WALSlot, cfg.WALPublication)
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "replication slot %q: %s; publication %q: %s\n", cfg.WALSlot, dropped(slot), cfg.WALPublication, dropped(pub))
				return nil
			})
		},
	})
	return wal
}

func dropped(b bool) string {
	if b {
		return "dropped"
	}
	return "did not exist"
}
