package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferry-outbox/ferry/internal/app"
	"github.com/ferry-outbox/ferry/walrelay"
)

// addWALFlags adds the poller's source and the log-tailing relay's names.
func addWALFlags(f *pflag.FlagSet, g *globals) {
	f.StringVar(&g.cfg.Source, "source", env("FERRY_SOURCE", app.SourcePoll), "where the poller finds committed events: poll (claim pending rows) or wal (tail the write-ahead log through a logical replication slot; needs wal_level=logical and REPLICATION) (FERRY_SOURCE)")
	f.StringVar(&g.cfg.WALSlot, "wal-slot", env("FERRY_WAL_SLOT", walrelay.DefaultSlot), "replication slot of --source wal; one per outbox, slots are cluster-wide (FERRY_WAL_SLOT)")
	f.StringVar(&g.cfg.WALPublication, "wal-publication", env("FERRY_WAL_PUBLICATION", walrelay.DefaultPublication), "publication of --source wal (FERRY_WAL_PUBLICATION)")
	f.DurationVar(&g.cfg.WALCatchUpInterval, "wal-catch-up-interval", envDuration("FERRY_WAL_CATCH_UP_INTERVAL", 30*time.Second), "--source wal: how often a claim pass delivers rows the stream cannot (FERRY_WAL_CATCH_UP_INTERVAL)")
}

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
			return g.withPool(cmd.Context(), func(ctx context.Context, cfg app.Config, _ *slog.Logger, pool *pgxpool.Pool) error {
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
