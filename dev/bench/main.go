package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// Main runs the benchmark with command-line args (without the program
// name) and returns the exit code: 0 when every run delivered every event
// in order (targets missed do not fail it), 1 otherwise, 2 for bad flags.
// It must run in a binary that plays the relay role (RoleEnv), as
// dev/cmd/ferry-bench does.
func Main(args []string, stdout, stderr io.Writer) int {
	var cfg Config
	var workloads, systems, sources string
	fs := flag.NewFlagSet("ferry-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `ferry-bench measures Ferry (the ferry binary, as shipped, with its embedded
Temporal server) in both its lanes, the workflow lane (ferry) and the
publish-first lane (publish-first), against a plain relay in the same run,
reads the server's own counts of its work (state transitions, billed actions,
visibility writes), measures the engine's own ceiling, and checks its targets. It needs PostgreSQL
and RabbitMQ; it starts everything else.

Workloads: %s
Results: a table on stdout, <out>/results.json, <out>/latency.png; logs in <out>/logs.

Flags:
`, strings.Join(WorkloadNames, ", "))
		fs.PrintDefaults()
	}
	fs.Float64Var(&cfg.Scale, "scale", 1, "multiply the event counts of burst, burst-start, one-per-agg, hot and backlog, and the ceiling's workflows (0.1 for a quick run)")
	fs.IntVar(&cfg.Reps, "reps", 3, "runs per workload and system; the table shows medians")
	fs.StringVar(&workloads, "workloads", strings.Join(WorkloadNames, ","), "comma-separated workloads to run")
	fs.StringVar(&systems, "systems", strings.Join(SystemNames, ","), "comma-separated systems: ferry (bin/ferry run, the workflow lane), publish-first (bin/ferry run --lane publish-first), plain (the plain relay)")
	fs.StringVar(&cfg.Baseline, "baseline", "", "an earlier results.json: the workflow lane's ratio to the plain relay and the server's counts per event are held against it (a target)")
	fs.StringVar(&sources, "sources", SourcePoll, "comma-separated relay sources both Ferry systems run with, each a run of its own: poll, wal (log tailing; the bench then starts a PostgreSQL cluster of its own with wal_level=logical and runs every system on it, so leave -postgres-url out)")
	fs.StringVar(&cfg.PostgresBin, "pg-bin", env("FERRY_BENCH_PG_BIN", ""), "folder of initdb and pg_ctl for the bench's own cluster with -sources wal (FERRY_BENCH_PG_BIN; default "+defaultPostgresBin+")")
	fs.DurationVar(&cfg.SteadyDuration, "duration", 0, "how long each steady-rate workload produces (default 1m)")
	fs.DurationVar(&cfg.CommitDuration, "commit-duration", 0, "how long each producer commit-rate variant runs (default 10s)")
	fs.IntVar(&cfg.Clients, "clients", 16, "concurrent producer transactions")
	fs.StringVar(&cfg.OutDir, "out", "bench-output", "folder for results.json, latency.png and logs")
	fs.StringVar(&cfg.FerryBin, "ferry-bin", "bin/ferry", "the ferry binary under test")
	fs.StringVar(&cfg.TemporalBin, "temporal-bin", "", "the Temporal server's binary (default ferry-bench-temporal next to this one)")
	fs.StringVar(&cfg.TemporalPostgresURL, "temporal-postgres-url", env("FERRY_BENCH_TEMPORAL_POSTGRES_URL", ""), "keep the Temporal server's state in PostgreSQL on this server instead of SQLite, in databases -temporal-db and -temporal-db_visibility, dropped and created afresh (FERRY_BENCH_TEMPORAL_POSTGRES_URL)")
	fs.StringVar(&cfg.TemporalPostgresDB, "temporal-db", "", "with -temporal-postgres-url: the name of the Temporal server's database (default ferry_bench_temporal)")
	fs.IntVar(&cfg.TemporalCluster, "temporal-cluster", 0, "with -temporal-postgres-url: run Temporal as a cluster of processes, a frontend process and this many history processes (ferry-dev dev temporal; default 0: one process)")
	fs.StringVar(&cfg.FerryDevBin, "ferry-dev-bin", "", "with -temporal-cluster: the ferry-dev binary that runs the cluster's processes (default ferry-dev next to -ferry-bin)")
	fs.IntVar(&cfg.TemporalShards, "temporal-shards", 0, "with -temporal-postgres-url: history shards (default 4)")
	fs.StringVar(&cfg.PostgresURL, "postgres-url", env("FERRY_BENCH_POSTGRES_URL", ""), "PostgreSQL database for the bench schema (FERRY_BENCH_POSTGRES_URL; default Ferry's)")
	fs.StringVar(&cfg.Schema, "schema", "ferry_bench", "bench-only schema, dropped and created afresh")
	fs.StringVar(&cfg.AMQPURL, "amqp-url", env("FERRY_BENCH_AMQP_URL", ""), "RabbitMQ URL (FERRY_BENCH_AMQP_URL; default guest on 127.0.0.1)")
	fs.StringVar(&cfg.Exchange, "exchange", "ferry.bench", "exchange the relays publish to")
	fs.DurationVar(&cfg.StallTimeout, "stall-timeout", 0, "give up on a run when nothing arrives for this long; the rest counts as lost (default 2m)")
	fs.IntVar(&cfg.HistorySample, "history-sample", 300, "aggregates whose workflow histories are read per Ferry run; more are estimated from a uniform sample")
	fs.IntVar(&cfg.RelayBatchSize, "relay-batch", 500, "the plain relay's claim size")
	fs.DurationVar(&cfg.Settle, "settle", 0, "wait after a Ferry run's last event before waiting for Temporal to go idle and reading its counts and histories (default 1s; over ferry's idle timeout, 1m, counts the workflows' completion too)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg.Workloads = splitList(workloads)
	cfg.Systems = splitList(systems)
	cfg.Sources = splitList(sources)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "ferry-bench: find own binary: %v\n", err)
		return 1
	}
	cfg.Self = self
	cfg, err = cfg.WithDefaults()
	if err != nil {
		fmt.Fprintf(stderr, "ferry-bench: %v\n", err)
		return 2
	}

	var baseline *Results
	if cfg.Baseline != "" {
		if baseline, err = ReadBaseline(cfg.Baseline); err != nil {
			fmt.Fprintf(stderr, "ferry-bench: -baseline: %v\n", err)
			return 2
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := newProgress(stderr)
	fmt.Fprintf(stderr, "ferry-bench: workloads %s on %s (Ferry's sources: %s), %d rep(s), scale %g, steady %s; Ctrl-C stops.\n",
		strings.Join(cfg.Workloads, ", "), strings.Join(cfg.Systems, " and "), strings.Join(cfg.Sources, ", "), cfg.Reps, cfg.Scale, cfg.SteadyDuration)
	if set := ferryEnv(); len(set) > 0 {
		fmt.Fprintf(stderr, "ferry-bench: ferry also gets these settings from your environment: %s\n", strings.Join(set, " "))
	}
	r := &runner{cfg: cfg, progress: p, baseline: baseline}
	res, err := r.run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "ferry-bench: interrupted; nothing written")
			return 1
		}
		fmt.Fprintf(stderr, "ferry-bench: %v\n", err)
		return 1
	}
	res.WriteTable(stdout)
	jsonPath := filepath.Join(cfg.OutDir, "results.json")
	if err := writeFile(jsonPath, res.WriteJSON); err != nil {
		fmt.Fprintf(stderr, "ferry-bench: %v\n", err)
		return 1
	}
	pngPath := filepath.Join(cfg.OutDir, "latency.png")
	if err := res.WritePlot(pngPath); err != nil {
		fmt.Fprintf(stderr, "ferry-bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nWritten: %s, %s; logs in %s\n", jsonPath, pngPath, filepath.Join(cfg.OutDir, "logs"))
	if len(res.Problems) > 0 {
		return 1
	}
	return 0
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// ferryEnv lists FERRY_* variables of this environment that the ferry
// process inherits and the bench does not set itself (tuning knobs such as
// FERRY_BATCH_SIZE), passwords hidden.
func ferryEnv() []string {
	own := map[string]bool{"FERRY_POSTGRES_URL": true, "FERRY_AMQP_URL": true, "FERRY_TEMPORAL_ADDRESS": true,
		"FERRY_TEMPORAL_NAMESPACE": true, "FERRY_EXCHANGE": true, "FERRY_TASK_QUEUE": true, "FERRY_NO_SCHEDULES": true, "FERRY_LOG_LEVEL": true,
		"FERRY_SOURCE": true, "FERRY_LANE": true, "FERRY_WAL_SLOT": true, "FERRY_WAL_PUBLICATION": true,
		"FERRY_DESTINATIONS": true, "FERRY_NO_BROKER": true}
	var out []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "FERRY_") || strings.HasPrefix(k, "FERRY_BENCH_") || own[k] {
			continue
		}
		if strings.Contains(k, "PASSWORD") || strings.Contains(k, "KEY") || strings.Contains(k, "SECRET") || strings.Contains(k, "URL") {
			v = "…"
		}
		out = append(out, k+"="+v)
	}
	return out
}
