package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/spf13/cobra"

	"github.com/ferry-outbox/ferry/internal/app"
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
			return g.withPool(cmd.Context(), func(ctx context.Context, cfg app.Config, logger *slog.Logger, _ *pgxpool.Pool) error {
				c, err := app.DialTemporal(ctx, cfg, logger)
				if err != nil {
					return err
				}
				c.Close()
				pub, err := app.OpenPublisher(ctx, cfg)
				if err != nil {
					return err
				}
				_ = pub.Close()
				fmt.Fprintln(g.stdout, "ferry: PostgreSQL, Temporal and RabbitMQ answer")
				return nil
			})
		},
	}
}

// withPool reads the configuration and opens its PostgreSQL pool, both
// within Config.ConnectTimeout, and runs f with them under that deadline;
// the pool is closed when f returns.
func (g *globals) withPool(ctx context.Context, f func(ctx context.Context, cfg app.Config, logger *slog.Logger, pool *pgxpool.Pool) error) error {
	cfg, logger, err := g.config()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	pool, err := app.OpenPool(ctx, cfg.PostgresURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(ctx, cfg, logger, pool)
}
