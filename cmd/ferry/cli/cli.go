package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/cmd/ferry/app"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/schema"
	"github.com/ferry-outbox/ferry/workflows"
)

// Main runs the ferry command with args (without the program name) and
// returns the process exit code. dev supplies `ferry dev`'s embedded server,
// sandboxes and demo; the production binary passes nil.
func Main(args []string, stdout, stderr io.Writer, dev Dev) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, g := newRoot(stdout, stderr, dev)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "ferry: %s\n", g.maskError(explain(err)))
		return 1
	}
	return 0
}

// maskError is err's text with the fragments of sensitive fields masked
// (a database or validation error can quote a payload), when the flags
// that name them were read.
func (g *globals) maskError(msg string) string {
	red, err := g.cfg.Redactor()
	if err != nil {
		return msg
	}
	return red.Text("", "", nil, msg)
}

type globals struct {
	cfg        app.Config
	logLevel   string
	policies   []string
	configFile string
	stdout     io.Writer
	stderr     io.Writer
}

func newRoot(stdout, stderr io.Writer, dev Dev) (*cobra.Command, *globals) {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "ferry",
		Short: "Transactional outbox that hands delivery to Temporal",
		Long: `Ferry relays events committed to a PostgreSQL outbox table through one Temporal
workflow per aggregate to RabbitMQ: at-least-once, in order per aggregate.

Every flag can also be set by the environment variable shown with it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	addSettingFlags(root.PersistentFlags(), g)
	addConfigFileFlag(root, g)
	root.AddCommand(pingCmd(g), versionCmd(g))

	root.AddCommand(
		migrateCmd(g),
		serveCmd(g, "run", "Run the poller and the worker in one process", ferry.Roles{Poller: true, Worker: true}),
		serveCmd(g, "poller", "Run only the poller (PostgreSQL → Temporal)", ferry.Roles{Poller: true}),
		serveCmd(g, "worker", "Run only the worker (Temporal → RabbitMQ)", ferry.Roles{Worker: true}),
		devCmd(g, dev),
		consumeExampleCmd(g),
		codecServerCmd(g),
		walCmd(g),
	)
	root.AddCommand(operatorCmds(g)...)
	return root, g
}

func (g *globals) config() (app.Config, *slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return app.Config{}, nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", g.logLevel)
	}
	for _, raw := range g.policies {
		typ, p, err := app.ParsePolicy(raw)
		if err != nil {
			return app.Config{}, nil, err
		}
		if g.cfg.Policies == nil {
			g.cfg.Policies = map[string]workflows.EventPolicy{}
		}
		g.cfg.Policies[typ] = p
	}
	cfg, err := g.cfg.WithDefaults()
	if err != nil {
		return app.Config{}, nil, err
	}
	red, err := cfg.Redactor()
	if err != nil {
		return app.Config{}, nil, err
	}
	// Every log line of the process, the Temporal SDK's included, passes
	// the sensitive fields' mask.
	logger := slog.New(red.Handler(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level})))
	return cfg, logger, nil
}

func migrateCmd(g *globals) *cobra.Command {
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade Ferry's tables (idempotent, safe to run concurrently)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := g.config()
			if err != nil {
				return err
			}
			return migrate(cmd.Context(), cfg, lockTimeout, g.stdout)
		},
	}
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", envDuration("FERRY_MIGRATE_LOCK_TIMEOUT", schema.DefaultLockTimeout),
		"each migration gives up, changing nothing, when it waits longer than this for a table lock; 0: no limit (FERRY_MIGRATE_LOCK_TIMEOUT)")
	return cmd
}

// migrate applies the migrations; lockTimeout 0 waits for table locks as
// long as it takes.
func migrate(ctx context.Context, cfg app.Config, lockTimeout time.Duration, out io.Writer) error {
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	pool, err := cfg.OpenPool(cctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if lockTimeout == 0 {
		lockTimeout = -1 // MigrateWith's "no limit"
	}
	res, err := schema.MigrateWith(ctx, pool, schema.MigrateOptions{LockTimeout: lockTimeout, Progress: func(m schema.Migration) {
		fmt.Fprintf(out, "applying %04d_%s…\n", m.Version, m.Name)
	}})
	if err != nil {
		return err
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(out, "schema is at version %d in %s: nothing to do\n", res.Current, broker.Redact(cfg.Postgres.URL))
	} else {
		fmt.Fprintf(out, "schema is at version %d in %s: applied %d migration(s)\n", res.Current, broker.Redact(cfg.Postgres.URL), len(res.Applied))
	}
	return nil
}

func serveCmd(g *globals, use, short string, roles ferry.Roles) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, logger, err := g.config()
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cfg, roles, logger, g.stdout, nil)
		},
	}
}

// serve runs the fx app until ctx ends. started, when not nil, runs once
// everything is up; extra options join the app's (e.g. fx.Populate).
func serve(ctx context.Context, cfg app.Config, roles ferry.Roles, logger *slog.Logger, out io.Writer, started func(), extra ...fx.Option) error {
	var metricsSrv *metrics.Server
	a := fx.New(app.Options(cfg, roles, logger), fx.Populate(&metricsSrv), fx.Options(extra...))
	if err := a.Err(); err != nil {
		return app.RootCause(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*cfg.ConnectTimeout)
	defer cancel()
	if err := a.Start(startCtx); err != nil {
		return app.RootCause(err)
	}
	fmt.Fprintf(out, "ferry: %s running: PostgreSQL %s → Temporal %s (namespace %s, task queue %s) → %s. Ctrl-C stops.\n",
		roleNames(roles), broker.Redact(cfg.Postgres.URL), cfg.Temporal.Address, cfg.Namespace, cfg.TaskQueue, targetsLine(cfg.Config))
	if metricsSrv != nil {
		fmt.Fprintf(out, "ferry: Prometheus /metrics on http://%s/metrics\n", metricsSrv.Addr())
	} else {
		fmt.Fprintln(out, "ferry: no /metrics (set --metrics-address or FERRY_METRICS_ADDRESS to serve them)")
	}
	if started != nil {
		started()
	}
	<-ctx.Done()
	fmt.Fprintln(out, "ferry: stopping; in-flight work finishes or is retried later…")
	// Detached: ctx is already cancelled, and stopping needs time of its own.
	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelStop()
	if err := a.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	fmt.Fprintln(out, "ferry: stopped")
	return nil
}

// targetsLine says where events go: RabbitMQ and/or the workflow
// destinations.
func targetsLine(cfg ferry.Config) string {
	var parts []string
	if !cfg.NoBroker {
		parts = append(parts, fmt.Sprintf("RabbitMQ %s (exchange %s)", broker.Redact(cfg.AMQPURL), cfg.Exchange))
	}
	// Parsed when the config was filled: the error cannot happen here.
	if dests, _ := cfg.DestinationRouter(); dests.Len() > 0 {
		parts = append(parts, fmt.Sprintf("%d workflow destination route(s)", dests.Len()))
	}
	line := strings.Join(parts, " and ")
	if cfg.NoBroker {
		line += " (no broker)"
	}
	return line
}

func roleNames(r ferry.Roles) string {
	var names []string
	if r.Poller {
		names = append(names, "poller")
	}
	if r.Worker {
		names = append(names, "worker")
	}
	return strings.Join(names, " and ")
}
