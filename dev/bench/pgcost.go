package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresCost is what PostgreSQL did during one run: from the first
// reading (after the tables were emptied, before the relay started and
// before a backlog was committed) to the last (WAL and CPU: pgStatFlush
// after the last event arrived; rows updated: once the relay stopped and
// its backends reported their statistics). It includes the producer's
// inserts and the relay's start, alike for every system.
type PostgresCost struct {
	// RowsUpdated in outbox_events: pg_stat_user_tables.n_tup_upd, which
	// counts HOT updates too; HOTUpdated is that part of it
	// (n_tup_hot_upd).
	RowsUpdated int64 `json:"outbox_rows_updated"`
	HOTUpdated  int64 `json:"outbox_rows_hot_updated"`
	// WALBytes: pg_current_wal_lsn() at the end minus at the start, the
	// whole cluster's.
	WALBytes int64 `json:"wal_bytes"`
	// CPUSeconds: utime + stime of the cluster's processes (nil on a
	// server that is not the bench's own).
	CPUSeconds *float64 `json:"cpu_seconds,omitempty"`
}

// pgReading is one reading of PostgreSQL's counters.
type pgReading struct {
	updated, hotUpdated int64
	lsn                 uint64
	cpu                 time.Duration
	hasCPU              bool
}

// sqlOutboxStats reads the outbox table's update counters and the WAL
// position in one statement. pg_stat_user_tables shows what backends have
// reported: a busy backend reports at most once a second, one that went
// idle within 10s, one that exits as it ends (PostgreSQL 15).
const sqlOutboxStats = `SELECT s.n_tup_upd, s.n_tup_hot_upd, pg_current_wal_lsn()::text
FROM pg_stat_user_tables s WHERE s.schemaname = $1 AND s.relname = 'outbox_events'`

// pgStatFlush is how long a run waits after its last event before it reads
// the WAL position and CPU time, so that the relay's last marks (after the
// last publish) are in them.
const pgStatFlush = 2 * time.Second

// readPostgres reads the counters; with postmaster > 0 also the CPU time
// of that cluster's processes.
func readPostgres(ctx context.Context, pool *pgxpool.Pool, schema string, postmaster int) (pgReading, error) {
	var r pgReading
	var lsn string
	if err := pool.QueryRow(ctx, sqlOutboxStats, schema).Scan(&r.updated, &r.hotUpdated, &lsn); err != nil {
		return r, fmt.Errorf("read outbox_events statistics: %w", err)
	}
	var err error
	if r.lsn, err = parseLSN(lsn); err != nil {
		return r, err
	}
	if postmaster > 0 {
		if r.cpu, err = clusterCPU(postmaster); err != nil {
			return r, err
		}
		r.hasCPU = true
	}
	return r, nil
}

// postgresCost is the difference between two readings.
func postgresCost(start, end pgReading) PostgresCost {
	c := PostgresCost{RowsUpdated: end.updated - start.updated, HOTUpdated: end.hotUpdated - start.hotUpdated,
		WALBytes: int64(end.lsn - start.lsn)}
	if start.hasCPU && end.hasCPU {
		s := (end.cpu - start.cpu).Seconds()
		c.CPUSeconds = &s
	}
	return c
}

// parseLSN reads a pg_lsn's text form, two hexadecimal halves "16/B374D848".
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("WAL position %q is not an LSN", s)
	}
	return h<<32 | l, nil
}

// clusterCPU is the CPU time the cluster of postmaster used so far: the
// postmaster's own and its reaped children's (cutime, cstime: backends of
// connections that ended), plus that of its live children (backends,
// walsenders, the checkpointer, autovacuum…). A backend that exits between
// two readings moves from the second term to the first, so differences
// of readings count it once.
func clusterCPU(postmaster int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", postmaster))
	if err != nil {
		return 0, fmt.Errorf("read stat of the postmaster %d: %w", postmaster, err)
	}
	st, err := parseStatTimes(stat)
	if err != nil {
		return 0, fmt.Errorf("postmaster %d: %w", postmaster, err)
	}
	total := st.self + st.children
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended since the listing
		}
		if st, err := parseStatTimes(b); err == nil && st.ppid == postmaster {
			total += st.self + st.children
		}
	}
	return total, nil
}

// statTimes are the CPU fields of /proc/<pid>/stat.
type statTimes struct {
	ppid int
	// self is utime + stime; children cutime + cstime, of the children
	// the process waited for.
	self, children time.Duration
}

// parseStatTimes reads ppid (field 4) and utime, stime, cutime, cstime
// (fields 14–17) of /proc/<pid>/stat; counting starts after the command
// name's last ')', as in parseStatCPU.
func parseStatTimes(stat []byte) (statTimes, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return statTimes{}, fmt.Errorf("stat %q has no command name", truncateBytes(stat, 80))
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 15 {
		return statTimes{}, fmt.Errorf("stat has %d fields after the command name, want at least 15", len(f))
	}
	var n [5]int64
	for j, k := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return statTimes{}, fmt.Errorf("stat field %d %q is not a number", k+3, f[k])
		}
		n[j] = v
	}
	tick := func(t int64) time.Duration { return time.Duration(t) * time.Second / clockTick }
	return statTimes{ppid: int(n[0]), self: tick(n[1] + n[2]), children: tick(n[3] + n[4])}, nil
}
