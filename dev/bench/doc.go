// Package bench is Ferry's benchmark: it measures Ferry as
// shipped — the ferry binary's `run` command, a separate process, on the
// embedded Temporal server in a process of its own — in both its lanes
// (SystemFerry, the workflow lane; SystemLane, the publish-first lane,
// see lane.go) side by side with a plain relay (Relay: SKIP LOCKED claim →
// publish with pipelined confirms → mark published, no workflow engine),
// on the same PostgreSQL, RabbitMQ and producer, alternating, and reports
// medians. Ferry runs once per
// selected relay source (Config.Sources): polling (--source poll, the
// default) and log tailing (--source wal). Log tailing needs
// wal_level=logical, so with it the bench starts a PostgreSQL cluster of its
// own (initdb and pg_ctl in a temporary folder, removed at the end) and runs
// every system and source on it, one replication slot per run, dropped
// after it.
//
// The producer commits a business row and its events through package
// outbox in real transactions; a counting consumer on its own queue notes
// when each event id arrives and checks that every committed event arrived,
// in version order within its aggregate. Latency is commit → receipt;
// throughput is events / (first commit → last receipt). CPU and peak memory
// come from /proc of the relay process and the Temporal server; Temporal
// history events and workflow tasks per event from the server's histories
// of the run's aggregate workflows; state transitions, billed actions,
// visibility writes, runs started and persistence latency from the
// server's own metrics, scraped before a run and once the server went idle
// after it. Every measured run starts on an idle server. PostgreSQL's own
// work per run: rows of outbox_events updated (pg_stat_user_tables), WAL
// bytes (pg_current_wal_lsn) and, on the bench's own cluster, the CPU time
// of its processes from /proc. The ceiling workload measures the engine
// alone: trivial workflows started one per ID and completed at once, by a
// worker in the bench process. The burst-start workloads route every
// event to a start workflow destination as well (or, with --no-broker,
// instead of RabbitMQ): a workflow that completes at once, run by a worker
// in the bench process on the run's own task queue; there an event counts
// as delivered when its row is marked published, for both systems.
//
// The package owns the workloads, the measurement and the report (table,
// JSON, PNG). It does not link the Temporal server, so the plain relay,
// dev/cmd/ferry-bench re-executed (RoleEnv), is as small as a plain relay is;
// dev/cmd/ferry-bench-temporal runs the server, or, with
// Config.TemporalCluster, ferry-dev's `dev temporal` runs it as a cluster of
// processes laid out by dev/tcluster (metrics, CPU and memory summed over
// them). It creates and drops only its own schema (Config.Schema), Temporal
// databases (Config.TemporalPostgresDB), exchange, replication slots and
// publications, and its own cluster; it never reconfigures a server it is
// given.
package bench
