package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/ferry-outbox/ferry/dev/tcluster"
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
