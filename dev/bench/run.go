package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

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
	res := &Results{Started: started, Machine: readMachine(), Config: r.cfg}
	deliveries := r.deliveries()
	if r.needTemporal() {
		if err := r.startTemporal(ctx); err != nil {
			return nil, err
		}
	}
	steps := len(deliveries) * len(r.entries()) * r.cfg.Reps
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
			entries := r.entries()
			if rep%2 == 0 {
				slices.Reverse(entries)
			}
			for _, e := range entries {
				run, err := r.runOne(ctx, shapeOf(w, r.cfg.Scale), e, rep)
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

// entry is one system under test on a workload: Ferry with one of its
// sources, or the plain relay (source "").
type entry struct{ system, source string }

// name tells the entry's runs apart in logs and aggregate types:
// "ferry" (--source poll), "ferry-wal" or "plain".
func (e entry) name() string { return variantOf(e.system, e.source) }

// entries are the systems under test in the first rep's order, Ferry once
// per source.
func (r *runner) entries() []entry {
	var out []entry
	for _, sys := range r.cfg.Systems {
		if sys != SystemFerry {
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
	return (r.has(SystemFerry) && len(r.deliveries()) > 0) || r.hasWorkload(WorkloadCeiling)
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

// startTemporal starts the embedded Temporal server in a process of its own
// (dev/cmd/ferry-bench-temporal) with a fresh SQLite file, as `ferry dev` keeps
// it, serving its own metrics on a free port. A start can fail when
// another process takes one of the ports the server picked: it is tried
// three times.
func (r *runner) startTemporal(ctx context.Context) error {
	if r.cfg.TemporalCluster > 0 {
		return r.startTemporalCluster(ctx)
	}
	// A folder of its own, emptied at every start: the server keeps more
	// than one file there (WAL, a visibility database of its own).
	dir := filepath.Join(r.cfg.OutDir, "temporal")
	db := filepath.Join(dir, "temporal.db")
	for try := 1; ; try++ {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("empty %s: %w", dir, err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		metricsAddr, err := freeAddress()
		if err != nil {
			return err
		}
		env := []string{TemporalDBEnv + "=" + db, TemporalLogEnv + "=" + filepath.Join(r.cfg.OutDir, "logs", "temporal-server.log"),
			TemporalMetricsEnv + "=" + metricsAddr}
		if u := r.cfg.TemporalPostgresURL; u != "" {
			if err := dropTemporalDatabases(ctx, u, r.cfg.TemporalPostgresDB); err != nil {
				return err
			}
			r.progress.say("Temporal: starting the embedded server (devserver, PostgreSQL %s databases %s and %s_visibility, %d history shards, metrics on %s) in its own process…",
				redactURL(u), r.cfg.TemporalPostgresDB, r.cfg.TemporalPostgresDB, r.cfg.TemporalShards, metricsAddr)
			env = append(env, TemporalPGEnv+"="+u, TemporalPGDBEnv+"="+r.cfg.TemporalPostgresDB, TemporalShardsEnv+"="+strconv.Itoa(r.cfg.TemporalShards))
		} else {
			r.progress.say("Temporal: starting the embedded server (devserver, SQLite %s, metrics on %s) in its own process…", db, metricsAddr)
		}
		c, err := startChild("Temporal server", r.cfg.TemporalBin, nil, env,
			filepath.Join(r.cfg.OutDir, "logs", "temporal.log"), TemporalReady)
		if err != nil {
			return err
		}
		line, err := c.waitReady(ctx, 3*time.Minute)
		if err == nil {
			err = checkMetrics(ctx, metricsURL(metricsAddr))
		}
		if err == nil {
			r.temporal = c
			r.temporalAddr = strings.TrimSpace(line[strings.Index(line, TemporalReady)+len(TemporalReady):])
			r.temporalMetrics = []string{metricsURL(metricsAddr)}
			break
		}
		_ = c.stop(5 * time.Second)
		if try == 3 || ctx.Err() != nil {
			return err
		}
		r.progress.say("Temporal: did not start (%v); trying again", err)
	}
	if err := r.dialTemporal(ctx); err != nil {
		return err
	}
	r.progress.say("Temporal: ready on %s (pid %d)", r.temporalAddr, r.temporal.pid())
	return nil
}

// dialTemporal connects the bench's client to the server's frontend.
func (r *runner) dialTemporal(ctx context.Context) error {
	tc, err := client.DialContext(ctx, client.Options{HostPort: r.temporalAddr, Namespace: namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		return fmt.Errorf("dial Temporal at %s: %w", r.temporalAddr, err)
	}
	r.tc = tc
	return nil
}

// freeAddress is a loopback host:port that nothing listened on a moment
// ago, for the server's metrics. Another process may take it before the
// server binds it; startTemporal then tries again.
func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port for Temporal's metrics: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("find a free port for Temporal's metrics: %w", err)
	}
	return addr, nil
}

// checkMetrics makes sure the server serves the metrics the bench reads.
func checkMetrics(ctx context.Context, url string) error {
	m, err := scrapeServer(ctx, url)
	if err != nil {
		return err
	}
	if m.family(metricPersistenceRequests) == nil {
		return fmt.Errorf("the Temporal server's metrics at %s have no %s: is dev/cmd/ferry-bench-temporal built from this tree?", url, metricPersistenceRequests)
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
// the same, empty tables.
func (r *runner) truncate(ctx context.Context) error {
	if _, err := r.pool.Exec(ctx, "TRUNCATE outbox_events, outbox_aggregates, bench_orders"); err != nil {
		return fmt.Errorf("truncate bench tables: %w", err)
	}
	return nil
}

// Commit-rate variants.
const (
	commitBusiness = "business row only"
	commitOutbox   = "+ outbox insert (NOTIFY trigger on, as shipped)"
	commitNoNotify = "+ outbox insert, NOTIFY trigger disabled"
	commitPlainRow = "+ a plain second row (reference: any insert)"
)

// commitVariants are the commit workload's transactions, in the first
// rep's order.
var commitVariants = []string{commitBusiness, commitOutbox, commitNoNotify, commitPlainRow}

// commitRates measures the producer's commit rate in four variants, each
// rep in a rotated order, with no relay running.
func (r *runner) commitRates(ctx context.Context) (*CommitSummary, error) {
	variants := commitVariants
	samples := map[string][]float64{}
	for rep := 1; rep <= r.cfg.Reps; rep++ {
		for i := range variants {
			v := variants[(i+rep-1)%len(variants)]
			r.progress.step("commit · rep %d/%d: %d clients, %s, for %s", rep, r.cfg.Reps, r.cfg.Clients, v, r.cfg.CommitDuration)
			if err := r.truncate(ctx); err != nil {
				return nil, err
			}
			if v == commitNoNotify {
				if _, err := r.pool.Exec(ctx, "ALTER TABLE outbox_events DISABLE TRIGGER outbox_events_notify"); err != nil {
					return nil, fmt.Errorf("disable the NOTIFY trigger: %w", err)
				}
			}
			r.seq++
			extra := extraOutbox
			switch v {
			case commitBusiness:
				extra = extraNone
			case commitPlainRow:
				extra = extraPlainRow
			}
			rate, err := r.prod.commitRate(ctx, r.cfg.CommitDuration, fmt.Sprintf("r%d_commit", r.seq), extra)
			if v == commitNoNotify {
				if _, err := r.pool.Exec(context.WithoutCancel(ctx), "ALTER TABLE outbox_events ENABLE TRIGGER outbox_events_notify"); err != nil {
					return nil, fmt.Errorf("enable the NOTIFY trigger again: %w", err)
				}
			}
			if err != nil {
				return nil, err
			}
			samples[v] = append(samples[v], rate)
			r.progress.done("%s commits/s", count(int(rate)))
		}
	}
	if err := r.truncate(ctx); err != nil {
		return nil, err
	}
	c := &CommitSummary{Clients: r.cfg.Clients, Seconds: r.cfg.CommitDuration.Seconds(),
		BusinessOnly: Median(samples[commitBusiness]), WithOutbox: Median(samples[commitOutbox]),
		WithOutboxNoNotify: Median(samples[commitNoNotify]), WithPlainRow: Median(samples[commitPlainRow]),
		Samples: map[string][]float64{"business_only": samples[commitBusiness], "with_outbox": samples[commitOutbox],
			"with_outbox_no_notify": samples[commitNoNotify], "with_plain_row": samples[commitPlainRow]}}
	c.OutboxCost = 1 - c.WithOutbox/c.BusinessOnly
	c.OutboxCostNoNotify = 1 - c.WithOutboxNoNotify/c.BusinessOnly
	c.PlainRowCost = 1 - c.WithPlainRow/c.BusinessOnly
	return c, nil
}

// startSystem starts the system under test in its own process and waits
// until it is ready.
func (r *runner) startSystem(ctx context.Context, e entry, seq int) (*child, error) {
	logPath := filepath.Join(r.cfg.OutDir, "logs", fmt.Sprintf("run%02d-%s.log", seq, e.name()))
	var c *child
	var err error
	var ready string
	switch e.system {
	case SystemFerry:
		ready = ferryReady
		c, err = startChild("ferry run --source "+e.source, r.cfg.FerryBin, []string{"run"}, r.ferryEnv(e.source, seq), logPath, ready)
	case SystemPlain:
		ready = relayReady
		c, err = startChild("plain relay", r.cfg.Self, nil, []string{
			RoleEnv + "=" + RoleRelay,
			relayPostgresEnv + "=" + r.schemaURL,
			relayAMQPEnv + "=" + r.cfg.AMQPURL,
			relayExchangeEnv + "=" + r.cfg.Exchange,
			fmt.Sprintf("%s=%d", relayBatchEnv, r.cfg.RelayBatchSize),
		}, logPath, ready)
	}
	if err != nil {
		return nil, err
	}
	if _, err := c.waitReady(ctx, 2*time.Minute); err != nil {
		_ = c.stop(5 * time.Second)
		return nil, err
	}
	return c, nil
}

// settledUpdates reads outbox_events' update counters until two readings
// 500ms apart agree (at most 10s): the stopped relay's backends report
// theirs as they exit, a moment after the relay did.
func (r *runner) settledUpdates(ctx context.Context) (updated, hot int64, err error) {
	var last pgReading
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		cur, err := readPostgres(ctx, r.pool, r.cfg.Schema, 0)
		if err != nil {
			return 0, 0, err
		}
		if (i > 0 && cur.updated == last.updated && cur.hotUpdated == last.hotUpdated) || time.Now().After(deadline) {
			return cur.updated, cur.hotUpdated, nil
		}
		last = cur
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return 0, 0, ctx.Err()
		}
	}
}

// ferryEnv is the environment of run seq's ferry processes with source.
func (r *runner) ferryEnv(source string, seq int) []string {
	env := []string{
		"FERRY_POSTGRES_URL=" + r.schemaURL,
		"FERRY_AMQP_URL=" + r.cfg.AMQPURL,
		"FERRY_TEMPORAL_ADDRESS=" + r.temporalAddr,
		"FERRY_TEMPORAL_NAMESPACE=" + namespace,
		"FERRY_EXCHANGE=" + r.cfg.Exchange,
		// A task queue of its own: workflows of earlier runs, idle
		// until their timeout, never take this run's worker's time.
		fmt.Sprintf("FERRY_TASK_QUEUE=ferry-bench-%d", seq),
		"FERRY_NO_SCHEDULES=true",
		"FERRY_LOG_LEVEL=warn",
		"FERRY_SOURCE=" + source,
	}
	if source == SourceWAL {
		// A slot and publication of the run's own, dropped after it
		// (dropSlot): a slot left behind would hand the next WAL run
		// every row committed since, the other systems' runs included.
		env = append(env, fmt.Sprintf("FERRY_WAL_SLOT=ferry_bench_%d", seq), fmt.Sprintf("FERRY_WAL_PUBLICATION=ferry_bench_%d", seq))
	}
	return env
}

// dropSlot drops run seq's replication slot and publication with `ferry
// wal drop-slot`, retrying while PostgreSQL still counts the stopped
// relay's connection as the slot's reader.
func (r *runner) dropSlot(ctx context.Context, seq int) error {
	var err error
	for try := 1; try <= 20; try++ {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(dctx, r.cfg.FerryBin, "wal", "drop-slot")
		cmd.Env = append(os.Environ(), r.ferryEnv(SourceWAL, seq)...)
		var out []byte
		out, err = cmd.CombinedOutput()
		cancel()
		if err == nil {
			return nil
		}
		err = fmt.Errorf("%s wal drop-slot: %w\n%s", r.cfg.FerryBin, err, out)
		if !sleepCtx(ctx, 500*time.Millisecond) {
			break
		}
	}
	return err
}

// memPoint is one sample of the relay's (and Temporal's) memory during a
// run, against how many events had arrived.
type memPoint struct {
	Received    int     `json:"received"`
	RelayMiB    float64 `json:"relay_mib"`
	TemporalMiB float64 `json:"temporal_mib,omitempty"`
}

// runOne runs one workload once on one system.
func (r *runner) runOne(ctx context.Context, s shape, e entry, rep int) (RunResult, error) {
	r.seq++
	seq := r.seq
	system := e.system
	aggType := fmt.Sprintf("r%d_%s_%s", seq, s.name, e.name())
	res := RunResult{Workload: s.name, System: system, Source: e.source, Rep: rep, AggregateType: aggType}
	r.progress.step("%s · %s · rep %d/%d: %s", s.name, e.name(), rep, r.cfg.Reps, s.what)
	if err := r.truncate(ctx); err != nil {
		return res, err
	}
	pgStart, errPG := readPostgres(ctx, r.pool, r.cfg.Schema, r.postmaster)
	tally := NewTally(aggType)
	r.consumer.Count(tally)
	commits := newCommits()

	if s.backlog {
		r.progress.say("committing the backlog with the relay stopped…")
		if err := r.prod.produce(ctx, s, aggType, commits); err != nil {
			return res, err
		}
		r.progress.say("committed %s events in %s; starting %s", count(commits.events()), round(commits.last.Sub(commits.first)), system)
	}
	if err := r.waitIdle(ctx); err != nil {
		return res, err
	}
	var before *metricsReading
	if system == SystemFerry && r.temporal != nil {
		before = r.scrapeCost(ctx)
	}
	sys, err := r.startSystem(ctx, e, seq)
	if err != nil {
		return res, err
	}
	defer func() { _ = sys.stop(30 * time.Second) }()
	if e.source == SourceWAL {
		defer func() {
			_ = sys.stop(30 * time.Second) // the slot is dropped once nobody reads it
			if err := r.dropSlot(context.WithoutCancel(ctx), seq); err != nil {
				r.progress.say("the run's replication slot is left (it keeps WAL until the cluster is removed at the end): %v", err)
			}
		}()
	}
	readyAt := time.Now()

	var temporalPids []int
	if system == SystemFerry && r.temporal != nil {
		temporalPids = r.temporalPids()
		if err := resetPeaks(temporalPids); err != nil {
			r.progress.say("Temporal peak memory covers the whole bench: %v", err)
		}
	}
	sysStart, err := ReadProc(sys.pid())
	if err != nil {
		return res, err
	}
	var tempStart ProcSample
	if len(temporalPids) > 0 {
		if tempStart, err = readProcs(temporalPids); err != nil {
			return res, err
		}
	}

	// Memory samples, every 500 ms, for the backlog's bounded-memory check;
	// read after the sampler ended.
	var mem []memPoint
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sleepCtx(sampleCtx, 500*time.Millisecond) {
			p := memPoint{Received: tally.Received()}
			if ps, err := ReadProc(sys.pid()); err == nil {
				p.RelayMiB = mib(ps.RSS)
			}
			if len(temporalPids) > 0 {
				if ps, err := readProcs(temporalPids); err == nil {
					p.TemporalMiB = mib(ps.RSS)
				}
			}
			mem = append(mem, p)
		}
	}()

	produced := make(chan error, 1)
	prodCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	if s.backlog {
		produced <- nil
	} else {
		go func() {
			if s.rate > 0 {
				produced <- r.prod.produceSteady(prodCtx, s, r.cfg.SteadyDuration, aggType, commits)
			} else {
				produced <- r.prod.produce(prodCtx, s, aggType, commits)
			}
		}()
	}

	planned := s.events(r.cfg.SteadyDuration)
	var produceErr error
	producing := true
	lastCount, lastChange := 0, time.Now()
	stalled := false
	for {
		if producing {
			select {
			case produceErr = <-produced:
				producing = false
				lastChange = time.Now()
			default:
			}
		}
		got := tally.Received()
		if got != lastCount {
			lastCount, lastChange = got, time.Now()
		}
		want := commits.events()
		r.progress.update(got, want, planned, producing, time.Since(readyAt))
		if !producing && (produceErr != nil || got >= want) {
			break
		}
		if !producing && time.Since(lastChange) > r.cfg.StallTimeout {
			stalled = true
			break
		}
		if sys.exited() {
			break
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return res, ctx.Err()
		}
	}
	if producing {
		// The relay died mid-run: the producer's commits would spill into
		// the next run.
		stopProducing()
		<-produced
	}
	sysEnd, errSys := ReadProc(sys.pid())
	var tempEnd ProcSample
	if len(temporalPids) > 0 {
		tempEnd, _ = readProcs(temporalPids)
	}
	// The relay's last updates (the marks after the last publish) reach
	// pg_stat_user_tables only once its backends report them.
	var pgEnd pgReading
	if errPG == nil {
		if sleepCtx(ctx, pgStatFlush) {
			pgEnd, errPG = readPostgres(ctx, r.pool, r.cfg.Schema, r.postmaster)
		} else {
			errPG = ctx.Err()
		}
	}
	stopSampling()
	<-sampled
	if produceErr != nil {
		return res, fmt.Errorf("%s · %s: producer: %w", s.name, e.name(), produceErr)
	}
	if errPG != nil {
		r.progress.say("PostgreSQL's counts of this run are not in the results: %v", errPG)
	} else {
		pc := postgresCost(pgStart, pgEnd)
		res.Postgres = &pc
	}

	verdict, lat, last := tally.Check(commits.at)
	if err := writeFile(filepath.Join(r.cfg.OutDir, "logs", fmt.Sprintf("run%02d-%s-latency.csv", seq, e.name())), func(w io.Writer) error {
		return tally.writeTimeline(w, commits.at)
	}); err != nil {
		r.progress.say("latency timeline not written: %v", err)
	}
	res.Events = len(commits.at)
	res.Transactions = commits.transactions
	res.ProduceSeconds = commits.last.Sub(commits.first).Seconds()
	start := commits.first
	if s.backlog {
		start = readyAt
	}
	if !last.IsZero() {
		res.ElapsedSeconds = last.Sub(start).Seconds()
		res.Throughput = float64(res.Events-verdict.Lost) / res.ElapsedSeconds
	}
	res.Latency = Summarize(lat)
	if s.rate > 0 {
		warm := Summarize(tally.latenciesAfter(commits.at, commits.first.Add(WarmUp)))
		res.Warm = &warm
	}
	res.latencies = lat
	res.Verdict = verdict
	if errSys == nil {
		res.Relay = procFigures(sysStart, sysEnd, res.Events)
	}
	if len(temporalPids) > 0 {
		f := procFigures(tempStart, tempEnd, res.Events)
		res.Temporal = &f
	}
	if s.backlog {
		res.Memory = mem
	}
	switch {
	case sys.exited():
		res.Problem = fmt.Sprintf("%s exited during the run; see %s", sys.name, sys.log.Name())
	case stalled:
		res.Problem = fmt.Sprintf("nothing arrived for %s: stopped waiting with %s of %s events received", r.cfg.StallTimeout, count(tally.Received()), count(res.Events))
	}

	if system == SystemFerry && r.tc != nil {
		// The last workflow tasks complete just after the last publish.
		sleepCtx(ctx, r.cfg.Settle)
		if err := r.waitIdle(ctx); err != nil {
			return res, err
		}
		res.Server = r.costSince(ctx, before)
		r.progress.say("reading Temporal histories of this run's aggregate workflows…")
		hctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		h, err := countHistory(hctx, r.tc, aggType, s.aggregateIDs(res.Events), r.cfg.HistorySample)
		cancel()
		if err != nil {
			r.progress.say("could not count histories: %v", err)
		} else {
			res.History = &h
		}
	}
	if err := sys.stop(30 * time.Second); err != nil {
		r.progress.say("%v", err)
	}
	if res.Postgres != nil {
		// A busy backend that goes idle may hold its table statistics for
		// up to 10s (PostgreSQL 15's PGSTAT_IDLE_INTERVAL); one that exits
		// reports them as it ends. So the rows updated are read once the
		// relay's connections are gone.
		if updated, hot, err := r.settledUpdates(ctx); err != nil {
			r.progress.say("outbox rows updated of this run are not in the results: %v", err)
			res.Postgres = nil
		} else {
			res.Postgres.RowsUpdated, res.Postgres.HOTUpdated = updated-pgStart.updated, hot-pgStart.hotUpdated
		}
	}
	if system == SystemFerry && r.tc != nil {
		ids := s.aggregateIDs(res.Events)
		r.progress.say("terminating this run's open workflows (%s aggregates), so their idle timeouts do not load the next run…", count(len(ids)))
		began := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		n, err := closeRun(cctx, r.tc, aggType, ids)
		cancel()
		if err != nil {
			r.progress.say("could not terminate them all (%v): the next run may carry their completions", err)
		} else {
			r.progress.say("terminated %s in %s", count(n), time.Since(began).Round(100*time.Millisecond))
		}
	}
	r.progress.done("%s", res.oneLine())
	return res, nil
}

func procFigures(start, end ProcSample, events int) ProcFigures {
	cpu := (end.CPU - start.CPU).Seconds()
	f := ProcFigures{CPUSeconds: cpu, PeakMiB: mib(end.PeakRSS)}
	if events > 0 {
		f.CPUPer1k = cpu / float64(events) * 1000
	}
	return f
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

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

// dropTemporalDatabases drops the bench Temporal server's two databases
// (name, name_visibility) on the server at url, so that every start of the
// server begins empty, as the SQLite folder does.
func dropTemporalDatabases(ctx context.Context, url, name string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to Temporal's PostgreSQL %s: %w", redactURL(url), err)
	}
	defer conn.Close(ctx)
	for _, db := range []string{name, name + "_visibility"} {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop Temporal's database %s: %w", db, err)
		}
	}
	return nil
}
