package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// startSystem starts the system under test in its own process and waits
// until it is ready. A Ferry process also gets ferryExtra.
func (r *runner) startSystem(ctx context.Context, e entry, seq int, ferryExtra []string) (*child, error) {
	logPath := filepath.Join(r.cfg.OutDir, "logs", fmt.Sprintf("run%02d-%s.log", seq, e.name()))
	var c *child
	var err error
	var ready string
	switch e.system {
	case SystemFerry, SystemLane:
		ready = ferryReady
		c, err = startChild(fmt.Sprintf("ferry run --lane %s --source %s", laneOf(e.system), e.source), r.cfg.FerryBin, []string{"run"},
			append(r.ferryEnv(e.system, e.source, seq), ferryExtra...), logPath, ready)
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

// laneOf is the --lane of a Ferry system.
func laneOf(system string) string {
	if system == SystemLane {
		return "publish-first"
	}
	return "workflow"
}

// ferryEnv is the environment of run seq's ferry processes of system with
// source. The lane is always set, so that a FERRY_LANE of the bench's own
// environment cannot turn one system into the other.
func (r *runner) ferryEnv(system, source string, seq int) []string {
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
		"FERRY_LANE=" + laneOf(system),
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
func (r *runner) dropSlot(ctx context.Context, system string, seq int) error {
	var err error
	for try := 1; try <= 20; try++ {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(dctx, r.cfg.FerryBin, "wal", "drop-slot")
		cmd.Env = append(os.Environ(), r.ferryEnv(system, SourceWAL, seq)...)
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
