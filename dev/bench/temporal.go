package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-outbox/ferry/dev/tcluster"
	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// startTemporalCluster starts the bench's Temporal as a cluster of
// processes on Config.TemporalPostgresURL (package tcluster): a frontend
// process (frontend, matching, internal worker) and Config.TemporalCluster
// history processes sharing the history shards, each `ferry-dev dev
// temporal` serving its own metrics. The frontend process goes first: it
// creates the databases. A start can fail when another process takes one
// of the picked ports: it is tried three times, on fresh databases.
func (r *runner) startTemporalCluster(ctx context.Context) error {
	u, db := r.cfg.TemporalPostgresURL, r.cfg.TemporalPostgresDB
	pg := tcluster.Postgres{URL: u, Database: db, VisibilityDatabase: db + "_visibility", HistoryShards: r.cfg.TemporalShards}
	for try := 1; ; try++ {
		if err := dropTemporalDatabases(ctx, u, db); err != nil {
			return err
		}
		frontend, history := tcluster.Layout(r.cfg.TemporalCluster)
		r.progress.say("Temporal: starting a cluster of processes (%s, PostgreSQL %s databases %s and %s_visibility, %d history shards): a frontend process on %s and %d history processes…",
			r.cfg.FerryDevBin, redactURL(u), db, db, r.cfg.TemporalShards, frontend.Address, len(history))
		err := r.startMember(ctx, "frontend", frontend, pg)
		for i, h := range history {
			if err != nil {
				break
			}
			err = r.startMember(ctx, fmt.Sprintf("history-%d", i+1), h, pg)
		}
		if err == nil {
			r.temporalAddr = frontend.Address
			break
		}
		r.stopTemporal()
		if try == 3 || ctx.Err() != nil {
			return err
		}
		r.progress.say("Temporal: the cluster did not start (%v); trying again", err)
	}
	if err := r.dialTemporal(ctx); err != nil {
		return err
	}
	pids := r.temporalPids()
	r.progress.say("Temporal: cluster ready on %s (pids %v: frontend, then history)", r.temporalAddr, pids)
	return nil
}

// startMember starts one process of the cluster, waits until it serves
// and its metrics answer, and adds it to the runner's Temporal.
func (r *runner) startMember(ctx context.Context, name string, m tcluster.Member, pg tcluster.Postgres) error {
	metricsAddr, err := freeAddress()
	if err != nil {
		return err
	}
	logs := filepath.Join(r.cfg.OutDir, "logs")
	args := append(m.Args(pg), "--log-file", filepath.Join(logs, "temporal-"+name+"-server.log"))
	env := []string{"FERRY_METRICS_ADDRESS=" + metricsAddr, "FERRY_LOG_LEVEL=warn"}
	c, err := startChild("Temporal "+name, r.cfg.FerryDevBin, args, env, filepath.Join(logs, "temporal-"+name+".log"), tcluster.Ready)
	if err != nil {
		return err
	}
	if _, err := c.waitReady(ctx, 3*time.Minute); err != nil {
		_ = c.stop(5 * time.Second)
		return err
	}
	if err := checkMetrics(ctx, metricsURL(metricsAddr)); err != nil {
		_ = c.stop(5 * time.Second)
		return fmt.Errorf("Temporal %s: %w", name, err)
	}
	if r.temporal == nil {
		r.temporal = c
	} else {
		r.temporalHistory = append(r.temporalHistory, c)
	}
	r.temporalMetrics = append(r.temporalMetrics, metricsURL(metricsAddr))
	return nil
}

// stopTemporal stops the server's processes, the history processes of a
// cluster before its frontend, and forgets them.
func (r *runner) stopTemporal() {
	for _, c := range append(r.temporalHistory, r.temporal) {
		if c == nil {
			continue
		}
		if err := c.stop(30 * time.Second); err != nil {
			r.progress.say("Temporal: %v", err)
		}
	}
	r.temporal, r.temporalHistory, r.temporalMetrics = nil, nil, nil
}

// temporalPids are the server's processes: one, or a cluster's.
func (r *runner) temporalPids() []int {
	var pids []int
	if r.temporal != nil {
		pids = append(pids, r.temporal.pid())
	}
	for _, c := range r.temporalHistory {
		pids = append(pids, c.pid())
	}
	return pids
}

// readProcs samples processes pids and sums them: CPU, RSS and peak RSS
// (the peaks of several processes need not be at the same moment: their
// sum is an upper bound of the peak of the whole).
func readProcs(pids []int) (ProcSample, error) {
	var sum ProcSample
	for _, pid := range pids {
		s, err := ReadProc(pid)
		if err != nil {
			return ProcSample{}, err
		}
		sum.CPU += s.CPU
		sum.RSS += s.RSS
		sum.PeakRSS += s.PeakRSS
	}
	return sum, nil
}

// resetPeaks is ResetPeak of every process of pids.
func resetPeaks(pids []int) error {
	var errs []error
	for _, pid := range pids {
		errs = append(errs, ResetPeak(pid))
	}
	return errors.Join(errs...)
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
