package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/cmd/ferry/app"
)

// configWithin reads the configuration and gives ctx a deadline n connect
// timeouts away: the budget of a one-shot command. Call cancel when err is
// nil.
func (g *globals) configWithin(ctx context.Context, n int) (context.Context, context.CancelFunc, app.Config, *slog.Logger, error) {
	cfg, logger, err := g.config()
	if err != nil {
		return ctx, nil, cfg, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n)*cfg.ConnectTimeout)
	return ctx, cancel, cfg, logger, nil
}

// withPool runs fn with a pool of the configuration; opening the pool and
// fn share one connect timeout. The pool is closed after fn.
func (g *globals) withPool(ctx context.Context, fn func(context.Context, app.Config, *pgxpool.Pool) error) error {
	ctx, cancel, cfg, _, err := g.configWithin(ctx, 1)
	if err != nil {
		return err
	}
	defer cancel()
	pool, err := cfg.OpenPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(ctx, cfg, pool)
}

// connections opens what an operator command needs; close with the
// returned func.
func (g *globals) connections(ctx context.Context) (app.Config, *pgxpool.Pool, client.Client, func(), error) {
	cctx, cancel, cfg, logger, err := g.configWithin(ctx, 1)
	if err != nil {
		return cfg, nil, nil, nil, err
	}
	defer cancel()
	pool, err := cfg.OpenPool(cctx)
	if err != nil {
		return cfg, nil, nil, nil, err
	}
	c, err := cfg.DialTemporal(cctx, logger)
	if err != nil {
		pool.Close()
		return cfg, nil, nil, nil, err
	}
	return cfg, pool, c, func() { c.Close(); pool.Close() }, nil
}

// reportCmd is an operator command that reads T with the connections and
// prints it as JSON (--json, described by jsonHelp) or as text.
func reportCmd[T any](g *globals, use, short, jsonHelp string,
	collect func(context.Context, app.Config, *pgxpool.Pool, client.Client) (T, error),
	text func(io.Writer, app.Config, T) error,
) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg, pool, c, closeAll, err := g.connections(ctx)
			if err != nil {
				return err
			}
			defer closeAll()
			v, err := collect(ctx, cfg, pool, c)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			return text(g.stdout, cfg, v)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, jsonHelp)
	return cmd
}
