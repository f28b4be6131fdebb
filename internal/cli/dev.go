package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/devserver"
	"github.com/ferry-outbox/ferry/examples/inventory"
	"github.com/ferry-outbox/ferry/internal/demo"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/schema"
	"github.com/ferry-outbox/ferry/workflows"
)

func devCmd(g *globals) *cobra.Command {
	var (
		dataDir      string
		uiAddress    string
		every        time.Duration
		noDemo       bool
		faultRate    float64
		codecAddress string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Embedded Temporal server and UI, migrations, poller, worker and a demo producer",
		Long: `Starts everything Ferry needs on one machine besides PostgreSQL and RabbitMQ:
an embedded Temporal server (SQLite under --data-dir) on --temporal-address,
the Temporal UI on --ui-address, then migrates PostgreSQL, runs the poller and
the worker, and (unless --no-demo) a producer that commits demo orders with
their outbox events, and the example inventory consumer (examples/inventory),
which prints what it applies and what it deduplicates.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, logger, err := g.config()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			out := g.stdout

			// With codec keys the UI decrypts through a codec server of
			// its own; it listens first, so the UI is told its address.
			devCodec, err := listenDevCodec(cfg, codecAddress)
			if err != nil {
				return err
			}
			defer devCodec.stop()

			fmt.Fprintf(out, "ferry dev: starting embedded Temporal server on %s (state and log in %s)…\n", cfg.Temporal.Address, dataDir)
			srv, err := devserver.Start(ctx, devserver.Config{
				CodecEndpoint: devCodec.endpoint,
				DatabasePath:  filepath.Join(dataDir, "temporal.db"),
				Address:       cfg.Temporal.Address,
				UIAddress:     uiAddress,
				Namespace:     cfg.Namespace,
				LogFile:       filepath.Join(dataDir, "temporal-server.log"),
				// The dead-letter view: Ferry's search attributes.
				SearchAttributes: workflows.SearchAttributeTypes,
			})
			if err != nil {
				return err
			}
			defer func() {
				fmt.Fprintln(out, "ferry dev: stopping embedded Temporal server…")
				_ = srv.Stop()
			}()
			cfg.Temporal.Address = srv.FrontendAddress()
			devCodec.serve(srv.UIURL())

			if err := migrate(ctx, cfg, schema.DefaultLockTimeout, out); err != nil {
				return err
			}

			// Demo orders are charged and confirmed by e-mail through
			// sandboxes on loopback (README, Side effects).
			stopSandboxes, err := startSandboxes(ctx, &cfg, faultRate, out)
			if err != nil {
				return err
			}
			defer stopSandboxes()
			if cfg, err = cfg.WithDefaults(); err != nil {
				return err
			}

			var wg sync.WaitGroup
			defer wg.Wait()
			demoCtx, stopDemo := context.WithCancel(ctx)
			defer stopDemo()

			// The example consumer counts into the process's /metrics.
			var consumerMetrics *metrics.Consumer
			started := func() {
				fmt.Fprintf(out, "\n  Temporal UI:  %s/namespaces/%s/workflows\n", srv.UIURL(), cfg.Namespace)
				fmt.Fprintf(out, "  Temporal:     %s (namespace %s)\n", srv.FrontendAddress(), cfg.Namespace)
				if devCodec.endpoint != "" {
					fmt.Fprintf(out, "  Codec:        %s (payloads are encrypted; the UI decrypts them through it)\n", devCodec.endpoint)
				}
				if noDemo {
					fmt.Fprintln(out, "  Demo:         off; insert rows into outbox_events to see them flow")
					return
				}
				fmt.Fprintf(out, "  Demo:         an order every %s; consumer %q on queue %q prints what it applies and deduplicates\n\n",
					every, inventory.ConsumerName, inventory.DefaultQueue)
				cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
				defer cancel()
				pool, err := cfg.OpenPool(cctx)
				if err != nil {
					fmt.Fprintf(out, "ferry dev: demo producer off: %v\n", err)
					return
				}
				writer, _ := outbox.NewWriter(outbox.Config{})
				wg.Add(2)
				go func() {
					defer wg.Done()
					// Every 5th applied message is sent again, so the
					// deduplication shows.
					red, _ := cfg.Redactor() // validated by WithDefaults
					err := inventory.Run(demoCtx, inventory.Config{PostgresURL: cfg.Postgres.URL, AMQPURL: cfg.AMQPURL,
						Exchange: cfg.Exchange, Out: out, ResendEvery: 5, Logger: logger, Metrics: consumerMetrics, Redact: red})
					if err != nil {
						fmt.Fprintf(out, "ferry dev: example consumer stopped: %v\n", err)
					}
				}()
				go func() {
					defer wg.Done()
					defer pool.Close()
					if err := (&demo.Producer{Pool: pool, Writer: writer, Out: out, Every: every}).Run(demoCtx); err != nil {
						fmt.Fprintf(out, "ferry dev: demo producer stopped: %v\n", err)
					}
				}()
			}
			return serve(ctx, cfg, ferry.Roles{Poller: true, Worker: true}, logger, out, started, fx.Populate(&consumerMetrics))
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", env("FERRY_DEV_DATA_DIR", ".ferry"), "folder for the embedded server's SQLite file (FERRY_DEV_DATA_DIR)")
	f.StringVar(&uiAddress, "ui-address", env("FERRY_DEV_UI_ADDRESS", "127.0.0.1:8233"), "host:port of the Temporal UI; empty disables it (FERRY_DEV_UI_ADDRESS)")
	f.DurationVar(&every, "demo-every", envDuration("FERRY_DEV_DEMO_EVERY", time.Second), "pause between demo transactions")
	f.BoolVar(&noDemo, "no-demo", false, "run without the demo producer and consumer")
	f.StringVar(&codecAddress, "codec-address", "127.0.0.1:8234", "host:port of the codec server the UI decrypts payloads through, when --codec-key is set")
	f.Float64Var(&faultRate, "sandbox-fault-rate", 0.2, "share of first requests to the sandbox payment provider and SMTP sink that meet a fault")
	return cmd
}
