package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/examples/inventory"
	"github.com/ferry-outbox/ferry/internal/app"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/schema"
)

// Dev is the part of `ferry dev` that the production binary leaves out: the
// embedded Temporal server and UI (they link the Temporal server, its SQLite
// store and the UI server), the sandbox payment provider and SMTP sink, and
// the demo producer and consumer. The ferry-dev binary (module
// github.com/ferry-outbox/ferry/dev) supplies it; without it `ferry dev`
// says what to run instead and fails.
type Dev interface {
	// StartServer starts the embedded Temporal server with Ferry's search
	// attributes and, unless c.UIAddress is empty, its UI.
	StartServer(ctx context.Context, c DevServerConfig) (DevServer, error)
	// StartSandboxes starts the sandbox payment provider and SMTP sink, with
	// faultRate of first requests meeting a fault, and points cfg's unset
	// effect settings at them.
	StartSandboxes(ctx context.Context, cfg *app.Config, faultRate float64, out io.Writer) (stop func(), err error)
	// RunDemo runs the demo producer and the example inventory consumer
	// until ctx ends, printing to d.Out what they do.
	RunDemo(ctx context.Context, d Demo)
}

// DevServerConfig is what `ferry dev`'s flags say about the embedded server.
type DevServerConfig struct {
	Address       string // frontend host:port
	UIAddress     string // UI host:port; empty: no UI
	Namespace     string
	DatabasePath  string // SQLite file of the server's state
	LogFile       string // the server's own log
	CodecEndpoint string // codec server the UI decrypts payloads through; empty: none
}

// DevServer is a started embedded Temporal server.
type DevServer interface {
	FrontendAddress() string
	UIURL() string
	Stop() error
}

// Demo is what RunDemo runs against.
type Demo struct {
	Config  app.Config // with defaults
	Logger  *slog.Logger
	Out     io.Writer
	Every   time.Duration     // pause between demo transactions
	Metrics *metrics.Consumer // the example consumer counts into the process's /metrics
}

// errNoDev is `ferry dev`'s error in a binary without the embedded server.
var errNoDev = errors.New("this ferry binary has no embedded Temporal server: run `ferry-dev dev` (`make run` builds and runs it), " +
	"or run `ferry run` with --temporal-address set to a Temporal cluster")

func devCmd(g *globals, dev Dev) *cobra.Command {
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
which prints what it applies and what it deduplicates.

Only the ferry-dev binary has the embedded server; the production ferry
binary fails here and says what to run instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dev == nil {
				return errNoDev
			}
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

			fmt.Fprintf(out, "ferry dev: starting embedded Temporal server on %s (state and log in %s)…\n", cfg.TemporalAddress, dataDir)
			srv, err := dev.StartServer(ctx, DevServerConfig{
				CodecEndpoint: devCodec.endpoint,
				DatabasePath:  filepath.Join(dataDir, "temporal.db"),
				Address:       cfg.TemporalAddress,
				UIAddress:     uiAddress,
				Namespace:     cfg.Namespace,
				LogFile:       filepath.Join(dataDir, "temporal-server.log"),
			})
			if err != nil {
				return err
			}
			defer func() {
				fmt.Fprintln(out, "ferry dev: stopping embedded Temporal server…")
				_ = srv.Stop()
			}()
			cfg.TemporalAddress = srv.FrontendAddress()
			devCodec.serve(srv.UIURL())

			if err := migrate(ctx, cfg, schema.DefaultLockTimeout, out); err != nil {
				return err
			}

			// Demo orders are charged and confirmed by e-mail through
			// sandboxes on loopback (README, Side effects).
			stopSandboxes, err := dev.StartSandboxes(ctx, &cfg, faultRate, out)
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
				wg.Add(1)
				go func() {
					defer wg.Done()
					dev.RunDemo(demoCtx, Demo{Config: cfg, Logger: logger, Out: out, Every: every, Metrics: consumerMetrics})
				}()
			}
			return serve(ctx, cfg, app.Roles{Poller: true, Worker: true}, logger, out, started, fx.Populate(&consumerMetrics))
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
