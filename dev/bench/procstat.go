package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is Linux's USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat: 100 on every architecture Go supports (the kernel's
// HZ may differ; the value exported to user space does not).
const clockTick = 100

// ProcSample is what /proc says about one process at one moment.
type ProcSample struct {
	// CPU is user + system time since the process started.
	CPU time.Duration
	// RSS is the resident set now, PeakRSS its high-water mark (VmHWM)
	// since the start or the last ResetPeak.
	RSS, PeakRSS int64
}

// ReadProc samples process pid.
func ReadProc(pid int) (ProcSample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcSample{}, fmt.Errorf("read stat of process %d: %w", pid, err)
	}
	cpu, err := parseStatCPU(stat)
	if err != nil {
		return ProcSample{}, fmt.Errorf("process %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcSample{}, fmt.Errorf("read status of process %d: %w", pid, err)
	}
	return ProcSample{CPU: cpu, RSS: statusKiB(status, "VmRSS:") << 10, PeakRSS: statusKiB(status, "VmHWM:") << 10}, nil
}

// ResetPeak sets the process's VmHWM back to its current RSS, so that the
// next ReadProc reports the peak of what happened since.
func ResetPeak(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset peak memory of process %d: %w", pid, err)
	}
	return nil
}

// parseStatCPU reads utime and stime, fields 14 and 15 of /proc/<pid>/stat.
// The command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so counting starts after the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q has no command name", truncateBytes(stat, 80))
	}
	// After ')' come field 3 (state) onwards: utime is the 12th of them.
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("stat has %d fields after the command name, want at least 13", len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat utime %q / stime %q are not numbers", fields[11], fields[12])
	}
	return time.Duration(utime+stime) * time.Second / clockTick, nil
}

// statusKiB reads a "Key:   123 kB" line of /proc/<pid>/status; 0 if absent.
func statusKiB(status []byte, key string) int64 {
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

func truncateBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}
