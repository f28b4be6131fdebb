package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/ferry-outbox/ferry/cmd/ferry/app"
	"github.com/ferry-outbox/ferry/cmd/ferry/status"
)

// pingCmd checks, with the process's own configuration and credentials,
// that PostgreSQL, Temporal and RabbitMQ answer. It is the container health
// check (the image has no shell or curl): a poller or worker whose
// dependencies are unreachable with its settings is reported unhealthy.
// Liveness of the process itself needs no check: it exits on a fatal error.
func pingCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ping",
		Short: "Check that PostgreSQL, Temporal and RabbitMQ answer with this configuration (health check)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel, cfg, logger, err := g.configWithin(cmd.Context(), 1)
			if err != nil {
				return err
			}
			defer cancel()
			return ping(ctx, cfg, logger, g.stdout)
		},
	}
}

// ping opens and closes a pool, a Temporal client and a connection to
// RabbitMQ, in turn.
func ping(ctx context.Context, cfg app.Config, logger *slog.Logger, out io.Writer) error {
	pool, err := cfg.OpenPool(ctx)
	if err != nil {
		return err
	}
	pool.Close()
	c, err := cfg.DialTemporal(ctx, logger)
	if err != nil {
		return err
	}
	tinfo, err := status.CollectTemporal(ctx, c.WorkflowService(), cfg.Temporal.Address)
	c.Close()
	if err != nil {
		return err
	}
	if cfg.NoBroker {
		fmt.Fprintln(out, "ferry: PostgreSQL and Temporal answer (no broker: --no-broker)")
		fmt.Fprintf(out, "ferry: %s\n", tinfo)
		return nil
	}
	if err := cfg.CheckBroker(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "ferry: PostgreSQL, Temporal and RabbitMQ answer")
	fmt.Fprintf(out, "ferry: %s\n", tinfo)
	return nil
}
