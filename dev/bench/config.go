package bench

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Config configures a benchmark run. Main fills it from flags.
type Config struct {
	// Scale multiplies the event counts of the burst, burst-start,
	// one-per-agg, hot and backlog workloads and the ceiling's workflows.
	// Default 1.
	Scale float64
	// Reps is how often each workload runs per system; figures are medians.
	// Default 3.
	Reps int
	// Workloads to run, from WorkloadNames. Default all.
	Workloads []string
	// Systems to run: "ferry" (bin/ferry run in the workflow lane, the
	// default lane), "publish-first" (bin/ferry run --lane publish-first)
	// and "plain" (the plain relay). Default all three.
	Systems []string
	// Sources are the relay sources both Ferry systems run with, each a
	// run of its own per workload and rep: "poll" (--source poll, as
	// shipped) and/or "wal" (--source wal). Default poll. With wal the bench starts a
	// PostgreSQL cluster of its own (PostgresBin, wal_level=logical) and
	// every system and source runs on it, so that all see the same server;
	// PostgresURL must then be empty.
	Sources []string
	// PostgresBin holds initdb and pg_ctl for the bench's own cluster
	// (Sources with wal). Default /usr/lib/postgresql/15/bin.
	PostgresBin string
	// SteadyDuration is how long each steady-rate workload produces.
	// Default 60s.
	SteadyDuration time.Duration
	// CommitDuration is how long each producer commit-rate variant runs.
	// Default 10s.
	CommitDuration time.Duration
	// Clients is the number of concurrent producer transactions. Default 16.
	Clients int
	// OutDir receives results.json, latency.png and logs/. Default
	// "bench-output".
	OutDir string
	// FerryBin is the ferry binary under test. Default "bin/ferry".
	FerryBin string
	// Self is this benchmark's binary, re-executed for the plain relay.
	// Default os.Executable().
	Self string
	// TemporalBin is dev/cmd/ferry-bench-temporal's binary. Default
	// "ferry-bench-temporal" next to Self.
	TemporalBin string
	// TemporalPostgresURL makes the bench's Temporal server keep its state
	// in PostgreSQL on this server (postgres://user:password@host:port/db;
	// db is where the databases are created from), in the databases
	// TemporalPostgresDB and TemporalPostgresDB+"_visibility", dropped and
	// created afresh at every start of the server. Default: SQLite.
	TemporalPostgresURL string `json:"-"`
	// TemporalPostgresDB names the server's databases with
	// TemporalPostgresURL. Default "ferry_bench_temporal".
	TemporalPostgresDB string `json:"temporal_postgres_db,omitempty"`
	// TemporalCluster, above 0, runs the server as a cluster of processes
	// on TemporalPostgresURL (package dev/tcluster): a frontend process and
	// TemporalCluster history processes, each `ferry-dev dev temporal`.
	// Default 0: one process (ferry-bench-temporal).
	TemporalCluster int `json:"temporal_cluster,omitempty"`
	// FerryDevBin is the ferry-dev binary that runs the processes of a
	// TemporalCluster. Default "ferry-dev" next to FerryBin.
	FerryDevBin string
	// TemporalShards is the server's number of history shards with
	// TemporalPostgresURL (SQLite: 1). Default 4.
	TemporalShards int `json:"temporal_shards,omitempty"`
	// PostgresURL is the database the bench schema is made in. Default
	// Ferry's, postgres://postgres@127.0.0.1:5432/postgres; with Sources
	// wal, the bench's own cluster (set once it started).
	PostgresURL string
	// Schema is the bench-only schema; it is dropped and created afresh.
	// Default "ferry_bench".
	Schema string
	// AMQPURL of RabbitMQ. Default amqp://guest:guest@127.0.0.1:5672/.
	AMQPURL string
	// Exchange the systems publish to. Default "ferry.bench".
	Exchange string
	// StallTimeout ends a run whose consumer received nothing new for this
	// long; the missing events count as lost. Default 2m.
	StallTimeout time.Duration
	// HistorySample is how many aggregates' workflow histories per Ferry
	// run are read event by event; with more aggregates the totals are
	// estimated from a uniform sample. Default 300.
	HistorySample int
	// RelayBatchSize is the plain relay's claim size. Default 500.
	RelayBatchSize int
	// Baseline is an earlier results.json (of the workflow lane, "ferry",
	// and the plain relay) that the workflow lane's figures of this run
	// are held against: its ratio to the plain relay and the server's
	// counts per event, workload by workload. Default none: that target is
	// not run.
	Baseline string
	// Settle is how long a Ferry run waits after its last event arrived
	// before it waits for the server to go idle and reads its counts and
	// the Temporal histories. Default 1s: the last workflow tasks are in,
	// the idle completion of each aggregate workflow (after ferry's
	// --idle-timeout, 1m) is not; more than the idle timeout counts that
	// too.
	Settle time.Duration
}

// Workload names, in the order they run.
const (
	WorkloadCommit = "commit"
	WorkloadBurst  = "burst"
	// WorkloadBurstStart routes every event to a start workflow
	// destination as well as to RabbitMQ; WorkloadBurstStartNoBroker to
	// the destination alone (ferry run --no-broker). See destination.go.
	WorkloadBurstStart         = "burst-start"
	WorkloadBurstStartNoBroker = "burst-start-no-broker"
	WorkloadOnePerAgg          = "one-per-agg"
	WorkloadCeiling            = "ceiling"
	WorkloadHot                = "hot"
	WorkloadSteady100          = "steady-100"
	WorkloadSteady500          = "steady-500"
	// WorkloadSteadyAfterBurst commits a burst, waits until it is
	// delivered and at once, with no wait for the server to go idle,
	// produces steady-100: the steady figures right after a burst.
	WorkloadSteadyAfterBurst = "steady-100-after-burst"
	WorkloadBacklog          = "backlog"
)

// WorkloadNames lists every workload in run order.
// The start destination's workloads run next to burst, which they are
// compared with; the ceiling next to one-per-agg, which it is compared
// with, on a Temporal database of about the same size.
var WorkloadNames = []string{WorkloadCommit, WorkloadBurst, WorkloadBurstStart, WorkloadBurstStartNoBroker, WorkloadOnePerAgg, WorkloadCeiling, WorkloadHot, WorkloadSteady100, WorkloadSteady500, WorkloadSteadyAfterBurst, WorkloadBacklog}

// Systems under test. SystemFerry and SystemLane are both bin/ferry run,
// in the workflow lane (the default: every event through its aggregate's
// workflow) and in the publish-first lane.
const (
	SystemFerry = "ferry"
	SystemLane  = "publish-first"
	SystemPlain = "plain"
)

// SystemNames lists the systems in the tables' order.
var SystemNames = []string{SystemFerry, SystemLane, SystemPlain}

// isFerry says whether system runs bin/ferry (with Temporal).
func isFerry(system string) bool { return system == SystemFerry || system == SystemLane }

// Ferry's relay sources (cmd/ferry/cli's --source).
const (
	SourcePoll = "poll"
	SourceWAL  = "wal"
)

// SourceNames lists the sources in run order.
var SourceNames = []string{SourcePoll, SourceWAL}

// defaultPostgresBin is where Debian's PostgreSQL 15 keeps initdb and
// pg_ctl, as for the tests' private clusters (ferrytest/servers).
const defaultPostgresBin = "/usr/lib/postgresql/15/bin"

// privateCluster says whether the bench runs on a PostgreSQL cluster of
// its own: log tailing needs wal_level=logical, which the shared server
// does not have, and both sources must see the same server.
func (c Config) privateCluster() bool { return slices.Contains(c.Sources, SourceWAL) }

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// WithDefaults fills the defaults and validates c.
func (c Config) WithDefaults() (Config, error) {
	c.Scale = cmp.Or(c.Scale, 1)
	if c.TemporalPostgresURL != "" {
		c.TemporalPostgresDB = cmp.Or(c.TemporalPostgresDB, "ferry_bench_temporal")
		c.TemporalShards = cmp.Or(c.TemporalShards, 4)
		if c.TemporalShards < 1 {
			return c, fmt.Errorf("bench: Config.TemporalShards is %d: want at least 1", c.TemporalShards)
		}
		if !validIdent(c.TemporalPostgresDB) {
			return c, fmt.Errorf("bench: Config.TemporalPostgresDB %q: want a lower-case SQL name", c.TemporalPostgresDB)
		}
	}
	switch {
	case c.TemporalCluster < 0:
		return c, fmt.Errorf("bench: Config.TemporalCluster is %d: want 0 (one process) or a number of history processes", c.TemporalCluster)
	case c.TemporalCluster > 0 && c.TemporalPostgresURL == "":
		return c, fmt.Errorf("bench: Config.TemporalCluster %d needs Config.TemporalPostgresURL: the cluster's processes share its databases", c.TemporalCluster)
	}
	c.Reps = cmp.Or(c.Reps, 3)
	if len(c.Workloads) == 0 {
		c.Workloads = slices.Clone(WorkloadNames)
	}
	if len(c.Systems) == 0 {
		c.Systems = slices.Clone(SystemNames)
	}
	if len(c.Sources) == 0 {
		c.Sources = []string{SourcePoll}
	}
	for _, s := range c.Sources {
		if !slices.Contains(SourceNames, s) {
			return c, fmt.Errorf("bench: Config.Sources: unknown source %q; known: %s", s, strings.Join(SourceNames, ", "))
		}
	}
	slices.SortFunc(c.Sources, func(a, b string) int {
		return slices.Index(SourceNames, a) - slices.Index(SourceNames, b)
	})
	c.Sources = slices.Compact(c.Sources)
	if c.privateCluster() {
		if c.PostgresURL != "" {
			return c, fmt.Errorf("bench: Config.PostgresURL %s: with source wal the bench runs every system on a PostgreSQL cluster of its own (wal_level=logical); leave the URL out", redactURL(c.PostgresURL))
		}
		c.PostgresBin = cmp.Or(c.PostgresBin, defaultPostgresBin)
	}
	c.SteadyDuration = cmp.Or(c.SteadyDuration, time.Minute)
	c.CommitDuration = cmp.Or(c.CommitDuration, 10*time.Second)
	c.Clients = cmp.Or(c.Clients, 16)
	c.OutDir = cmp.Or(c.OutDir, "bench-output")
	c.FerryBin = cmp.Or(c.FerryBin, "bin/ferry")
	c.FerryDevBin = cmp.Or(c.FerryDevBin, filepath.Join(filepath.Dir(c.FerryBin), "ferry-dev"))
	if c.TemporalBin == "" && c.Self != "" {
		c.TemporalBin = filepath.Join(filepath.Dir(c.Self), "ferry-bench-temporal")
	}
	if !c.privateCluster() {
		c.PostgresURL = cmp.Or(c.PostgresURL, "postgres://postgres@127.0.0.1:5432/postgres")
	}
	c.Schema = cmp.Or(c.Schema, "ferry_bench")
	c.AMQPURL = cmp.Or(c.AMQPURL, "amqp://guest:guest@127.0.0.1:5672/")
	c.Exchange = cmp.Or(c.Exchange, "ferry.bench")
	c.StallTimeout = cmp.Or(c.StallTimeout, 2*time.Minute)
	c.HistorySample = cmp.Or(c.HistorySample, 300)
	c.RelayBatchSize = cmp.Or(c.RelayBatchSize, 500)
	c.Settle = cmp.Or(c.Settle, time.Second)

	switch {
	case c.Scale <= 0 || c.Scale > 10 || math.IsNaN(c.Scale):
		return c, fmt.Errorf("bench: Config.Scale %g: must be above 0 and at most 10", c.Scale)
	case c.Reps < 1:
		return c, fmt.Errorf("bench: Config.Reps %d: must be at least 1", c.Reps)
	case c.SteadyDuration < time.Second:
		return c, fmt.Errorf("bench: Config.SteadyDuration %s: must be at least 1s", c.SteadyDuration)
	case c.CommitDuration < time.Second:
		return c, fmt.Errorf("bench: Config.CommitDuration %s: must be at least 1s", c.CommitDuration)
	case c.Clients < 1 || c.Clients > 200:
		return c, fmt.Errorf("bench: Config.Clients %d: must be between 1 and 200", c.Clients)
	case !schemaName.MatchString(c.Schema) || c.Schema == "public":
		return c, fmt.Errorf("bench: Config.Schema %q: use a bench-only schema name of lower-case letters, digits and '_' (it is dropped)", c.Schema)
	case c.StallTimeout < time.Second:
		return c, fmt.Errorf("bench: Config.StallTimeout %s: must be at least 1s", c.StallTimeout)
	case c.Settle < 0:
		return c, fmt.Errorf("bench: Config.Settle %s: must not be negative", c.Settle)
	case c.HistorySample < 1:
		return c, fmt.Errorf("bench: Config.HistorySample %d: must be at least 1", c.HistorySample)
	}
	for _, w := range c.Workloads {
		if !slices.Contains(WorkloadNames, w) {
			return c, fmt.Errorf("bench: Config.Workloads: unknown workload %q; known: %s", w, strings.Join(WorkloadNames, ", "))
		}
	}
	for _, s := range c.Systems {
		if !slices.Contains(SystemNames, s) {
			return c, fmt.Errorf("bench: Config.Systems: unknown system %q; known: %s", s, strings.Join(SystemNames, ", "))
		}
	}
	slices.SortFunc(c.Systems, func(a, b string) int {
		return slices.Index(SystemNames, a) - slices.Index(SystemNames, b)
	})
	c.Systems = slices.Compact(c.Systems)
	if len(c.Workloads) == 0 {
		return c, errors.New("bench: Config.Workloads is empty")
	}
	// Run in the documented order whatever order the flag listed.
	slices.SortFunc(c.Workloads, func(a, b string) int {
		return slices.Index(WorkloadNames, a) - slices.Index(WorkloadNames, b)
	})
	c.Workloads = slices.Compact(c.Workloads)
	return c, nil
}

// shape is how a workload produces its events.
type shape struct {
	name string
	// what describes the workload in one line of output.
	what string
	// aggregates × eventsPerTx events in one transaction per aggregate, or
	// for hot, txs transactions of eventsPerTx events on one aggregate.
	aggregates, eventsPerTx, txs int
	payloadBytes                 int
	// rate > 0: a steady workload, one event per transaction at rate/s
	// for the steady duration, cycling over aggregates.
	rate float64
	// backlog: every event is committed before the system starts.
	backlog bool
	// burst (steady only): before the steady phase, burst aggregates × 10
	// events (1 KiB, one transaction per aggregate) are committed and
	// delivered; the steady phase starts right after, and the run's
	// latency and throughput are the steady phase's.
	burst int
	// destination: Ferry delivers every event to a start workflow
	// destination (destinationRoute), and an event counts as delivered
	// when its row is marked published, for every system (markWatch);
	// noBroker: Ferry runs with --no-broker, so the destination is all it
	// delivers to.
	destination, noBroker bool
}

// events is how many events the shape commits (steady: the planned count).
func (s shape) events(steady time.Duration) int {
	if s.rate > 0 {
		return int(s.rate*steady.Seconds()) + s.burst*burstEventsPerTx
	}
	return s.txs * s.eventsPerTx
}

// aggregateIDs are the aggregates a run of the shape with this many events
// wrote to.
func (s shape) aggregateIDs(events int) []string {
	n := s.aggregates
	if s.rate > 0 {
		n = max(min(n, events), s.burst)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = aggregateID(i)
	}
	return ids
}

// shapeOf returns the shape of a delivery workload at scale.
func shapeOf(name string, scale float64) shape {
	n := func(x int) int { return max(1, int(math.Round(float64(x)*scale))) }
	switch name {
	case WorkloadBurst:
		a := n(1000)
		return shape{name: name, what: fmt.Sprintf("%s aggregates × 10 events, 1 KiB payloads, one transaction per aggregate", count(a)),
			aggregates: a, eventsPerTx: 10, txs: a, payloadBytes: 1024}
	case WorkloadBurstStart, WorkloadBurstStartNoBroker:
		// A fifth of burst's aggregates: each event is a workflow start,
		// which costs the engine about what a one-event aggregate does.
		a := n(200)
		to := "a start destination and RabbitMQ"
		if name == WorkloadBurstStartNoBroker {
			to = "a start destination alone (--no-broker)"
		}
		return shape{name: name, what: fmt.Sprintf("%s aggregates × 10 events, 1 KiB payloads, one transaction per aggregate; Ferry delivers each event to %s", count(a), to),
			aggregates: a, eventsPerTx: 10, txs: a, payloadBytes: 1024, destination: true, noBroker: name == WorkloadBurstStartNoBroker}
	case WorkloadOnePerAgg:
		a := n(10000)
		return shape{name: name, what: fmt.Sprintf("%s aggregates × 1 event, one transaction each", count(a)),
			aggregates: a, eventsPerTx: 1, txs: a, payloadBytes: 128}
	case WorkloadHot:
		t := n(500)
		return shape{name: name, what: fmt.Sprintf("%s events on one aggregate, 10 per transaction", count(t*10)),
			aggregates: 1, eventsPerTx: 10, txs: t, payloadBytes: 128}
	case WorkloadSteady100, WorkloadSteady500:
		r := 100.0
		if name == WorkloadSteady500 {
			r = 500
		}
		return shape{name: name, what: fmt.Sprintf("%g events/s, one per transaction, over 100 aggregates", r),
			aggregates: 100, eventsPerTx: 1, payloadBytes: 128, rate: r}
	case WorkloadSteadyAfterBurst:
		b := n(1000)
		return shape{name: name, what: fmt.Sprintf("burst's %s aggregates × 10 events, delivered, then at once 100 events/s, one per transaction, over 100 of them; figures of the steady phase", count(b)),
			aggregates: 100, eventsPerTx: 1, payloadBytes: 128, rate: 100, burst: b}
	case WorkloadBacklog:
		a := n(10000)
		return shape{name: name, what: fmt.Sprintf("%s events (%s aggregates × 10) committed while the relay is stopped, then drained", count(a*10), count(a)),
			aggregates: a, eventsPerTx: 10, txs: a, payloadBytes: 128, backlog: true}
	}
	panic("bench: no shape for workload " + name)
}

// burstEventsPerTx and burstPayload are the burst's (and the prelude
// burst's of WorkloadSteadyAfterBurst).
const (
	burstEventsPerTx = 10
	burstPayload     = 1024
)

// count formats n with thousands separators: 10000 → "10,000".
func count(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + count(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// validIdent: a database name the bench may create and drop.
func validIdent(s string) bool { return regexp.MustCompile(`^[a-z_][a-z0-9_]{0,50}$`).MatchString(s) }

// temporalPersistence names the bench Temporal server's persistence.
func (c Config) temporalPersistence() string {
	if c.TemporalPostgresURL != "" {
		if c.TemporalCluster > 0 {
			return fmt.Sprintf("PostgreSQL, %d history shards, a cluster of processes: a frontend and %d history", c.TemporalShards, c.TemporalCluster)
		}
		return fmt.Sprintf("PostgreSQL, %d history shards", c.TemporalShards)
	}
	return "SQLite"
}
