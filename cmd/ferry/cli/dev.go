package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/cmd/ferry/app"
	"github.com/ferry-outbox/ferry/examples/inventory"
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
	// Postgres keeps the server's state in PostgreSQL instead of
	// DatabasePath; nil: SQLite.
	Postgres *DevPostgres
	// Services are the Temporal services to run; empty: all (a subset is
	// one part of a cluster of processes on Postgres).
	Services []string
	// InternalPorts are the 7 internal ports; empty: picked.
	InternalPorts []int
	// MetricsAddress is where the server serves its own metrics
	// (host:port, path /metrics); empty: none.
	MetricsAddress string
	// Progress receives what the server does to its databases.
	Progress io.Writer
}

// DevPostgres is where the embedded server keeps its state in PostgreSQL
// (devserver.Postgres in module dev).
type DevPostgres struct {
	URL                string // the server, postgres://user:password@host:port/db
	Database           string // workflow state, created when missing
	VisibilityDatabase string // visibility, created when missing
	HistoryShards      int32  // fixed when Database is set up
}

// Defaults of the PostgreSQL flags (devserver's, which this module cannot
// import).
const (
	defaultTemporalDatabase           = "temporal"
	defaultTemporalVisibilityDatabase = "temporal_visibility"
	defaultTemporalHistoryShards      = 4
)

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
		tpg          temporalPGFlags
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Embedded Temporal server and UI, migrations, poller, worker and a demo producer",
		Long: `Starts everything Ferry needs on one machine besides PostgreSQL and RabbitMQ:
an embedded Temporal server (SQLite under --data-dir, or PostgreSQL with
--temporal-postgres-url) on --temporal-address,
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

			pg, err := tpg.postgres()
			if err != nil {
				return err
			}
			if pg != nil {
				fmt.Fprintf(out, "ferry dev: starting embedded Temporal server on %s (state in PostgreSQL %s, databases %s and %s; log in %s)…\n",
					cfg.Temporal.Address, redactedURL(pg.URL), pg.Database, pg.VisibilityDatabase, dataDir)
			} else {
				fmt.Fprintf(out, "ferry dev: starting embedded Temporal server on %s (state and log in %s)…\n", cfg.Temporal.Address, dataDir)
			}
			srv, err := dev.StartServer(ctx, DevServerConfig{
				CodecEndpoint: devCodec.endpoint,
				Postgres:      pg,
				Progress:      out,
				DatabasePath:  filepath.Join(dataDir, "temporal.db"),
				Address:       cfg.Temporal.Address,
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
			cfg.Temporal.Address = srv.FrontendAddress()
			devCodec.serve(srv.UIURL())

			if err := migrate(ctx, cfg, schema.DefaultLockTimeout, out); err != nil {
				return err
			}

			// Demo orders are charged and confirmed by e-mail through
			// sandboxes on loopback (docs/side-effects.md).
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
	tpg.register(f)
	cmd.AddCommand(devTemporalCmd(g, dev))
	return cmd
}

// temporalPGFlags are the flags that keep the embedded server's state in
// PostgreSQL.
type temporalPGFlags struct {
	url, db, visDB string
	shards         int
}

func (p *temporalPGFlags) register(f *pflag.FlagSet) {
	f.StringVar(&p.url, "temporal-postgres-url", env("FERRY_DEV_TEMPORAL_POSTGRES_URL", ""),
		"keep the embedded server's state in this PostgreSQL server instead of SQLite, e.g. postgres://postgres@127.0.0.1:5432/postgres (FERRY_DEV_TEMPORAL_POSTGRES_URL)")
	f.StringVar(&p.db, "temporal-database", env("FERRY_DEV_TEMPORAL_DATABASE", defaultTemporalDatabase),
		"with --temporal-postgres-url: the database of workflow state, created when missing (FERRY_DEV_TEMPORAL_DATABASE)")
	f.StringVar(&p.visDB, "temporal-visibility-database", env("FERRY_DEV_TEMPORAL_VISIBILITY_DATABASE", defaultTemporalVisibilityDatabase),
		"with --temporal-postgres-url: the visibility database, created when missing (FERRY_DEV_TEMPORAL_VISIBILITY_DATABASE)")
	f.IntVar(&p.shards, "temporal-history-shards", envInt("FERRY_DEV_TEMPORAL_HISTORY_SHARDS", defaultTemporalHistoryShards),
		"with --temporal-postgres-url: number of history shards, fixed when the database is set up (FERRY_DEV_TEMPORAL_HISTORY_SHARDS)")
}

// postgres is the server's setting, nil without a URL.
func (p *temporalPGFlags) postgres() (*DevPostgres, error) {
	if p.url == "" {
		return nil, nil
	}
	if p.shards < 1 || p.shards > math.MaxInt32 {
		return nil, fmt.Errorf("--temporal-history-shards %d: want a number from 1 to %d", p.shards, math.MaxInt32)
	}
	return &DevPostgres{URL: p.url, Database: p.db, VisibilityDatabase: p.visDB, HistoryShards: int32(p.shards)}, nil
}

// devTemporalCmd runs one part of a Temporal cluster of processes on
// PostgreSQL, or a whole server, and nothing else.
func devTemporalCmd(g *globals, dev Dev) *cobra.Command {
	var (
		tpg      temporalPGFlags
		services []string
		ports    []int
		logFile  string
	)
	cmd := &cobra.Command{
		Use:   "temporal",
		Short: "Only a Temporal server, or a part of a cluster of processes on PostgreSQL (--services), until Ctrl-C",
		Long: `Runs Temporal's services given by --services in this process, on the
PostgreSQL databases of --temporal-postgres-url, and nothing of Ferry. Processes
started this way with the same databases form one cluster: they find each other
through the cluster_membership table. A frontend process (--services
frontend,matching,worker) listens on --temporal-address; history processes
(--services history) share the history shards, and reach the frontend on
--temporal-address. Give each process its own --ports (7 ports below 32768:
frontend membership, history gRPC and membership, matching gRPC and membership,
worker gRPC and membership; a process binds only those of its services). Start
the frontend process first: it creates and upgrades the databases. With
--metrics-address the process serves the server's own metrics there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dev == nil {
				return errNoDev
			}
			cfg, _, err := g.config()
			if err != nil {
				return err
			}
			pg, err := tpg.postgres()
			if err != nil {
				return err
			}
			if pg == nil && len(services) > 0 {
				return fmt.Errorf("--services needs --temporal-postgres-url: the parts of a cluster share its databases")
			}
			srv, err := dev.StartServer(cmd.Context(), DevServerConfig{
				Address:       cfg.Temporal.Address,
				Namespace:     cfg.Namespace,
				Postgres:      pg,
				Services:      services,
				InternalPorts: ports,
				Progress:      g.stdout,
				LogFile:       logFile,
				// Nothing of Ferry runs here: --metrics-address serves the
				// server's own metrics.
				MetricsAddress: cfg.MetricsAddress,
			})
			if err != nil {
				return err
			}
			running := "frontend, history, matching, worker"
			if len(services) > 0 {
				running = strings.Join(services, ", ")
			}
			fmt.Fprintf(g.stdout, "ferry dev temporal: %s running (frontend %s); Ctrl-C stops\n", running, cfg.Temporal.Address)
			<-cmd.Context().Done()
			return srv.Stop()
		},
	}
	f := cmd.Flags()
	tpg.register(f)
	f.StringSliceVar(&services, "services", nil, "Temporal services to run, of frontend, history, matching, worker (default: all)")
	f.IntSliceVar(&ports, "ports", nil, "the 7 internal ports, comma-separated (default: free ones)")
	f.StringVar(&logFile, "log-file", "", "file for the server's own log (default: none)")
	return cmd
}

// redactedURL is rawURL without its password, for messages.
func redactedURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
