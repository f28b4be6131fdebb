package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/outbox"
)

// namespace is the Temporal namespace of the bench's own server.
const namespace = "default"

// ferryReady is part of the line `ferry run` prints once its poller and
// worker are up (cmd/ferry/cli, serve).
const ferryReady = "running:"

// runner runs the benchmark: it owns the bench schema, the Temporal server
// process, the consumer, and one relay process at a time.
type runner struct {
	cfg      Config
	progress *progress
	// baseline is Config.Baseline's results, or nil.
	baseline *Results

	// cluster is the bench's own PostgreSQL (Config.Sources with wal),
	// postmaster its main process; nil and 0 on a server given by URL.
	cluster    *cluster
	postmaster int

	schemaURL string
	pool      *pgxpool.Pool
	prod      *producer
	consumer  *Consumer

	// temporal is the Temporal server's process, or the frontend process
	// of a cluster of processes (Config.TemporalCluster), temporalHistory
	// the cluster's history processes.
	temporal        *child
	temporalHistory []*child
	temporalAddr    string
	// temporalMetrics are the URLs of the server's own /metrics, one per
	// process.
	temporalMetrics []string
	tc              client.Client

	seq int
}

// run runs every selected workload and returns the results. Problems with
// the systems under test (lost events, a relay that dies) are in the
// results; an error means the benchmark itself could not run.
func (r *runner) run(ctx context.Context) (*Results, error) {
	started := time.Now()
	defer r.close()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	res := &Results{Started: started, Machine: readMachine(), Config: r.cfg, baseline: r.baseline}
	deliveries := r.deliveries()
	if r.needTemporal() {
		if err := r.startTemporal(ctx); err != nil {
			return nil, err
		}
	}
	steps := 0
	for _, w := range deliveries {
		steps += len(r.entries(shapeOf(w, r.cfg.Scale))) * r.cfg.Reps
	}
	if r.hasWorkload(WorkloadCommit) {
		steps += len(commitVariants) * r.cfg.Reps
	}
	if r.hasWorkload(WorkloadCeiling) {
		steps += len(ceilingVariants) * r.cfg.Reps
	}
	r.progress.steps = steps

	if r.hasWorkload(WorkloadCommit) {
		c, err := r.commitRates(ctx)
		if err != nil {
			return nil, err
		}
		res.Commit = c
	}
	for rep := 1; rep <= r.cfg.Reps; rep++ {
		for _, w := range r.cfg.Workloads {
			if w == WorkloadCeiling {
				for _, v := range ceilingVariants {
					c, err := r.ceilingOnce(ctx, v, rep)
					if err != nil {
						return nil, err
					}
					res.CeilingRuns = append(res.CeilingRuns, c)
				}
				continue
			}
			if !slices.Contains(deliveries, w) {
				continue
			}
			// Alternate the order of the systems (and sources), so slow
			// drift of the machine (other work, a growing Temporal
			// database) does not always favour the same one.
			s := shapeOf(w, r.cfg.Scale)
			entries := r.entries(s)
			if rep%2 == 0 {
				slices.Reverse(entries)
			}
			for _, e := range entries {
				run, err := r.runOne(ctx, s, e, rep)
				if err != nil {
					return nil, err
				}
				res.Runs = append(res.Runs, run)
			}
		}
	}
	res.Duration = time.Since(started)
	res.summarize()
	return res, nil
}

func (r *runner) has(system string) bool { return slices.Contains(r.cfg.Systems, system) }

// entry is one system under test on a workload: Ferry in one of its lanes
// with one of its sources, or the plain relay (source "").
type entry struct{ system, source string }

// name tells the entry's runs apart in logs and aggregate types:
// "ferry" (--source poll), "ferry-wal", "publish-first",
// "publish-first-wal" or "plain".
func (e entry) name() string { return variantOf(e.system, e.source) }

// entries are the systems under test of shape s in the first rep's order,
// each Ferry system once per source. The publish-first lane publishes to
// RabbitMQ, so it does not run a no-broker shape (ferry refuses
// --no-broker with it).
func (r *runner) entries(s shape) []entry {
	var out []entry
	for _, sys := range r.cfg.Systems {
		if sys == SystemLane && s.noBroker {
			continue
		}
		if !isFerry(sys) {
			out = append(out, entry{system: sys})
			continue
		}
		for _, src := range r.cfg.Sources {
			out = append(out, entry{system: sys, source: src})
		}
	}
	return out
}

func (r *runner) hasWorkload(w string) bool { return slices.Contains(r.cfg.Workloads, w) }

// deliveries are the selected workloads that run a relay.
func (r *runner) deliveries() []string {
	var out []string
	for _, w := range r.cfg.Workloads {
		if w != WorkloadCommit && w != WorkloadCeiling {
			out = append(out, w)
		}
	}
	return out
}

func (r *runner) needTemporal() bool {
	return ((r.has(SystemFerry) || r.has(SystemLane)) && len(r.deliveries()) > 0) || r.hasWorkload(WorkloadCeiling)
}

// setup checks the binary, makes the bench schema with `ferry migrate`,
// and starts the consumer.
func (r *runner) setup(ctx context.Context) error {
	if st, err := os.Stat(r.cfg.FerryBin); err != nil || st.IsDir() {
		return fmt.Errorf("the ferry binary under test is not at %s: build it with `make build`, or pass -ferry-bin", r.cfg.FerryBin)
	}
	if st, err := os.Stat(r.cfg.TemporalBin); r.needTemporal() && (err != nil || st.IsDir()) {
		return fmt.Errorf("the Temporal server binary is not at %s: build it with `make bench-bin`, or pass -temporal-bin", r.cfg.TemporalBin)
	}
	if err := os.MkdirAll(filepath.Join(r.cfg.OutDir, "logs"), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", r.cfg.OutDir, err)
	}
	if r.cfg.privateCluster() {
		r.progress.say("PostgreSQL: starting a cluster of the bench's own (wal_level=logical, %s) for --source wal; every system runs on it", r.cfg.PostgresBin)
		c, err := startCluster(ctx, r.cfg.PostgresBin)
		if err != nil {
			return err
		}
		r.cluster = c
		if r.postmaster, err = c.PostmasterPID(); err != nil {
			return err
		}
		r.cfg.PostgresURL = c.URL
	}
	r.progress.say("PostgreSQL: fresh schema %q in %s; `%s migrate` applies Ferry's tables", r.cfg.Schema, redactURL(r.cfg.PostgresURL), r.cfg.FerryBin)
	admin, err := pgx.Connect(ctx, r.cfg.PostgresURL)
	if err != nil {
		return fmt.Errorf("PostgreSQL at %s did not answer (start it, or pass -postgres-url): %w", redactURL(r.cfg.PostgresURL), err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{r.cfg.Schema}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", r.cfg.Schema, err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return fmt.Errorf("create schema %s: %w", r.cfg.Schema, err)
	}
	r.schemaURL = withSearchPath(r.cfg.PostgresURL, r.cfg.Schema)
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(mctx, r.cfg.FerryBin, "migrate")
	cmd.Env = append(os.Environ(), "FERRY_POSTGRES_URL="+r.schemaURL)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s migrate: %w\n%s", r.cfg.FerryBin, err, out)
	}
	pcfg, err := pgxpool.ParseConfig(r.schemaURL)
	if err != nil {
		return fmt.Errorf("parse PostgreSQL URL: %w", err)
	}
	pcfg.MaxConns = int32(r.cfg.Clients + 4)
	if r.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	if _, err := r.pool.Exec(ctx, sqlBenchTable); err != nil {
		return fmt.Errorf("create bench table: %w", err)
	}
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		return err
	}
	r.prod = &producer{pool: r.pool, writer: w, clients: r.cfg.Clients}
	queue := fmt.Sprintf("%s.consumer.%d", r.cfg.Exchange, os.Getpid())
	r.progress.say("RabbitMQ: exchange %q, counting consumer on queue %q", r.cfg.Exchange, queue)
	if r.consumer, err = StartConsumer(r.cfg.AMQPURL, r.cfg.Exchange, queue); err != nil {
		return fmt.Errorf("RabbitMQ at %s (start it, or pass -amqp-url): %w", redactURL(r.cfg.AMQPURL), err)
	}
	return nil
}

func (r *runner) close() {
	if r.consumer != nil {
		r.consumer.Close()
	}
	if r.tc != nil {
		r.tc.Close()
	}
	r.stopTemporal()
	if r.pool != nil {
		r.pool.Close()
	}
	if r.cluster != nil {
		if err := r.cluster.stop(filepath.Join(r.cfg.OutDir, "logs", "postgres.log")); err != nil {
			r.progress.say("PostgreSQL cluster: %v", err)
		}
	}
}

// truncate empties the outbox and the bench table, so every run starts on
// the same, empty tables: ownership (the publish-first lane's, a probe's
// aggregate still its workflow's) and the relays' registry too, which no
// relay uses between runs (a relay of one lane killed in the last run
// would otherwise refuse the other lane's start for 30 s).
func (r *runner) truncate(ctx context.Context) error {
	if _, err := r.pool.Exec(ctx, "TRUNCATE outbox_events, outbox_aggregates, outbox_owners, ferry_relays, bench_orders"); err != nil {
		return fmt.Errorf("truncate bench tables: %w", err)
	}
	return nil
}

// withSearchPath returns rawURL with its connections' search_path set.
func withSearchPath(rawURL, schema string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable URL>"
	}
	return u.Redacted()
}
