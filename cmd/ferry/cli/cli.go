package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/internal/app"
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
		fmt.Fprintf(stderr, "ferry: %s\n", g.maskError(err))
		return 1
	}
	return 0
}

// maskError is err's text with the fragments of sensitive fields masked
// (a database or validation error can quote a payload), when the flags
// that name them were read.
func (g *globals) maskError(err error) string {
	red, rerr := g.cfg.Redactor()
	if rerr != nil {
		return err.Error()
	}
	return red.Text("", "", nil, err.Error())
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
	f := root.PersistentFlags()
	f.StringVar(&g.cfg.PostgresURL, "postgres-url", env("FERRY_POSTGRES_URL", app.DefaultPostgresURL), "PostgreSQL URL (FERRY_POSTGRES_URL)")
	f.StringVar(&g.cfg.AMQPURL, "amqp-url", env("FERRY_AMQP_URL", app.DefaultAMQPURL), "RabbitMQ URL (FERRY_AMQP_URL)")
	f.StringVar(&g.cfg.TemporalAddress, "temporal-address", env("FERRY_TEMPORAL_ADDRESS", app.DefaultTemporalAddress), "Temporal frontend host:port (FERRY_TEMPORAL_ADDRESS)")
	f.StringVar(&g.cfg.Namespace, "namespace", env("FERRY_TEMPORAL_NAMESPACE", "default"), "Temporal namespace (FERRY_TEMPORAL_NAMESPACE)")
	f.StringVar(&g.cfg.TaskQueue, "task-queue", env("FERRY_TASK_QUEUE", "ferry"), "Temporal task queue of the aggregate workflows (FERRY_TASK_QUEUE)")
	f.StringVar(&g.cfg.Exchange, "exchange", env("FERRY_EXCHANGE", "ferry.events"), "RabbitMQ topic exchange (FERRY_EXCHANGE)")
	f.StringVar(&g.cfg.RoutingKey, "routing-key", env("FERRY_ROUTING_KEY", activities.DefaultRoutingKeyTemplate), "routing key template: {aggregate_type}, {event_type} and plain text (FERRY_ROUTING_KEY)")
	f.IntVar(&g.cfg.MaxMessageBytes, "max-message-size", envInt("FERRY_MAX_MESSAGE_SIZE", 0), "largest payload in bytes published; a larger event is quarantined unsent; keep it at or below RabbitMQ's max_message_size; 0: 16 MiB (FERRY_MAX_MESSAGE_SIZE)")
	f.IntVar(&g.cfg.BatchSize, "batch-size", envInt("FERRY_BATCH_SIZE", 200), "oldest rows per claim; a claim adds up to 4x as many later rows of the same aggregates (FERRY_BATCH_SIZE)")
	f.IntVar(&g.cfg.PublishBatchSize, "publish-batch-size", envInt("FERRY_PUBLISH_BATCH_SIZE", 0), "events per fast-path publish of an aggregate workflow; 0: 100, -1: one activity per event (FERRY_PUBLISH_BATCH_SIZE)")
	f.IntVar(&g.cfg.MaxBlockedRefs, "max-blocked-refs", envInt("FERRY_MAX_BLOCKED_REFS", 0), "event references a blocked aggregate workflow keeps; later events wait in PostgreSQL for its repair; 0: 5000, -1: no bound (FERRY_MAX_BLOCKED_REFS)")
	f.IntVar(&g.cfg.WorkflowTaskPollers, "workflow-task-pollers", envInt("FERRY_WORKFLOW_TASK_POLLERS", 0), "worker's concurrent polls for workflow tasks; 0: 8 (FERRY_WORKFLOW_TASK_POLLERS)")
	f.DurationVar(&g.cfg.Lease, "lease", envDuration("FERRY_LEASE", 30*time.Second), "lease of claimed rows (FERRY_LEASE)")
	f.DurationVar(&g.cfg.PollInterval, "poll-interval", envDuration("FERRY_POLL_INTERVAL", time.Second), "fallback poll interval when no NOTIFY arrives (FERRY_POLL_INTERVAL)")
	f.DurationVar(&g.cfg.IdleTimeout, "idle-timeout", envDuration("FERRY_IDLE_TIMEOUT", time.Minute), "an idle aggregate workflow completes after this (FERRY_IDLE_TIMEOUT)")
	f.StringVar(&g.cfg.StartMode, "start-mode", env("FERRY_START_MODE", "one-shot"), "aggregates not dispatched within --idle-timeout: one-shot (a run with the events in its input, done once they are published) or keep-alive (a run that idles --idle-timeout) (FERRY_START_MODE)")
	f.StringArrayVar(&g.policies, "policy", envList("FERRY_POLICY"), "retries and poison handling of an event type, TYPE:max-attempts=N,on-poison=block|skip; TYPE * for the rest (repeatable; FERRY_POLICY, ';'-separated)")
	f.DurationVar(&g.cfg.RowRetention, "retention", envDuration("FERRY_RETENTION", 720*time.Hour), "delivered rows older than this are deleted by the retention schedule (FERRY_RETENTION)")
	f.DurationVar(&g.cfg.PayloadRetention, "payload-retention", envDuration("FERRY_PAYLOAD_RETENTION", 0), "blank payloads of delivered rows older than this, keeping identity and timestamps; 0: keep (FERRY_PAYLOAD_RETENTION)")
	f.IntVar(&g.cfg.DriftSample, "drift-sample", envInt("FERRY_DRIFT_SAMPLE", 0), "aggregates each reconcile run compares with their workflows; 0: 50, -1: no drift check (FERRY_DRIFT_SAMPLE)")
	f.BoolVar(&g.cfg.NoSchedules, "no-schedules", env("FERRY_NO_SCHEDULES", "") == "true", "workers leave the retention and reconcile schedules alone (FERRY_NO_SCHEDULES=true)")
	f.StringVar(&g.cfg.MetricsAddress, "metrics-address", env("FERRY_METRICS_ADDRESS", ""), "serve Prometheus /metrics on host:port; empty: off (FERRY_METRICS_ADDRESS)")
	f.StringVar(&g.cfg.OTelExporter, "otel-exporter", env("FERRY_OTEL_EXPORTER", "none"), "export traces: none, otlp-grpc, otlp-http, or otlp (protocol from OTEL_EXPORTER_OTLP_PROTOCOL) (FERRY_OTEL_EXPORTER)")
	f.StringVar(&g.cfg.OTelEndpoint, "otel-endpoint", env("FERRY_OTEL_ENDPOINT", ""), "OTLP collector URL such as http://collector:4318; empty: OTEL_EXPORTER_OTLP_ENDPOINT, else localhost (FERRY_OTEL_ENDPOINT)")
	f.StringVar(&g.cfg.OTelServiceName, "otel-service-name", env("OTEL_SERVICE_NAME", "ferry"), "service.name of Ferry's spans (OTEL_SERVICE_NAME)")
	f.StringVar(&g.logLevel, "log-level", env("FERRY_LOG_LEVEL", "info"), "debug, info, warn or error (FERRY_LOG_LEVEL)")
	addTemporalSecurityFlags(f, g)
	addPrivacyFlags(f, g)
	addEffectFlags(f, g)
	addWALFlags(f, g)
	addConfigFileFlag(root, g)
	root.AddCommand(pingCmd(g))

	root.AddCommand(
		migrateCmd(g),
		serveCmd(g, "run", "Run the poller and the worker in one process", app.Roles{Poller: true, Worker: true}),
		serveCmd(g, "poller", "Run only the poller (PostgreSQL → Temporal)", app.Roles{Poller: true}),
		serveCmd(g, "worker", "Run only the worker (Temporal → RabbitMQ)", app.Roles{Worker: true}),
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
	pool, err := app.OpenPool(cctx, cfg.PostgresURL)
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
		fmt.Fprintf(out, "schema is at version %d in %s: nothing to do\n", res.Current, broker.Redact(cfg.PostgresURL))
	} else {
		fmt.Fprintf(out, "schema is at version %d in %s: applied %d migration(s)\n", res.Current, broker.Redact(cfg.PostgresURL), len(res.Applied))
	}
	return nil
}

func serveCmd(g *globals, use, short string, roles app.Roles) *cobra.Command {
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
func serve(ctx context.Context, cfg app.Config, roles app.Roles, logger *slog.Logger, out io.Writer, started func(), extra ...fx.Option) error {
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
	fmt.Fprintf(out, "ferry: %s running: PostgreSQL %s → Temporal %s (namespace %s, task queue %s) → RabbitMQ %s (exchange %s). Ctrl-C stops.\n",
		roleNames(roles), broker.Redact(cfg.PostgresURL), cfg.TemporalAddress, cfg.Namespace, cfg.TaskQueue, broker.Redact(cfg.AMQPURL), cfg.Exchange)
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

func roleNames(r app.Roles) string {
	var names []string
	if r.Poller {
		names = append(names, "poller")
	}
	if r.Worker {
		names = append(names, "worker")
	}
	return strings.Join(names, " and ")
}

func envList(name string) []string {
	v := env(name, "")
	if v == "" {
		return nil
	}
	return strings.Split(v, ";")
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	v := env(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry: %s=%q is not a whole number; using %d\n", name, v, def)
		return def
	}
	return n
}

func envDuration(name string, def time.Duration) time.Duration {
	v := env(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry: %s=%q is not a duration such as 500ms or 30s; using %s\n", name, v, def)
		return def
	}
	return d
}
