package cli

import (
	"encoding/json"
	"os"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/converter"
	"golang.org/x/term"

	"github.com/ferry-outbox/ferry/codec"
	"github.com/ferry-outbox/ferry/internal/status"
)

func statusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "One screen: backlog, throughput, blocked aggregates with repair commands, effects waiting on reconciliation, maintenance runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg, pool, c, closeAll, err := g.connections(ctx)
			if err != nil {
				return err
			}
			defer closeAll()
			// Memos are sealed by the payload codec when one is set.
			var dc converter.DataConverter
			cdc, err := cfg.Codec()
			if err != nil {
				return err
			}
			if cdc != nil {
				dc = codec.DataConverter(cdc)
			}
			snap, err := status.Collect(ctx, pool, c, dc, cfg.Namespace, cfg.TaskQueue)
			if err != nil {
				return err
			}
			if snap.WALSlot, err = status.CollectWALSlot(ctx, pool, cfg.WALSlot); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(snap)
			}
			f, isFile := g.stdout.(*os.File)
			status.Render(g.stdout, snap, isFile && term.IsTerminal(int(f.Fd())))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (durations in nanoseconds)")
	return cmd
}
