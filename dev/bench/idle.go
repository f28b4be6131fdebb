package bench

import (
	"context"
	"fmt"
	"time"
)

// The Temporal server counts as idle when, over idleWindow, its process
// used less than idleCPU of one core and neither wrote a workflow's state
// nor called its stores for the bench's namespace or visibility. Its own
// background work (namespace refreshes, cluster membership heartbeats,
// queue reads) is in the system namespace and stays below idleCPU. A run
// waits at most idleMax and is then measured anyway.
const (
	idleWindow = time.Second
	idleCPU    = 0.05
	idleMax    = 90 * time.Second
)

// serverActivity is what a scrape says about the server's work in the
// bench's namespace, for telling idle from busy.
type serverActivity struct {
	transitions float64 // mutable-state writes
	requests    float64 // store calls of the namespace and visibility calls
}

func activityOf(m serverMetrics, ns string) serverActivity {
	keep := inNamespace(ns)
	return serverActivity{
		transitions: m.histogram(metricStateTransitions, keep).Count,
		requests:    m.total(metricPersistenceRequests, keep) + m.total(metricVisibilityRequests, nil),
	}
}

// busyness is the server's work over one window.
type busyness struct {
	cpu                   float64 // share of one core
	transitions, requests float64 // per second
}

func (b busyness) idle() bool { return b.cpu < idleCPU && b.transitions == 0 && b.requests == 0 }

func (b busyness) String() string {
	return fmt.Sprintf("%.0f%% CPU, %s state transitions/s, %s store requests/s", 100*b.cpu, count(int(b.transitions)), count(int(b.requests)))
}

// measureBusyness compares two readings taken a window apart. The CPU
// window is the quiet time between the scrapes: a scrape of the server's
// /metrics (about a megabyte of text) costs it a few percent of a core
// itself.
func measureBusyness(before, after serverActivity, cpu, cpuWindow, window time.Duration) busyness {
	return busyness{
		cpu:         cpu.Seconds() / cpuWindow.Seconds(),
		transitions: (after.transitions - before.transitions) / window.Seconds(),
		requests:    (after.requests - before.requests) / window.Seconds(),
	}
}

// waitIdle waits until the Temporal server is idle, so that a run is not
// measured on a server still processing the last one (terminations,
// visibility tasks, timers), at most idleMax. It shows how busy the server
// is meanwhile; past idleMax it says so and returns, so that the run goes
// ahead on a busy server rather than the bench stopping.
func (r *runner) waitIdle(ctx context.Context) error {
	if r.temporal == nil {
		return nil
	}
	began := time.Now()
	pids := r.temporalPids()
	prev, prevAt, err := r.scrapeActivity(ctx)
	if err != nil {
		return err
	}
	for {
		cpuStart, err := readProcs(pids)
		if err != nil {
			return err
		}
		quietFrom := time.Now()
		if !sleepCtx(ctx, idleWindow) {
			return ctx.Err()
		}
		cpuEnd, err := readProcs(pids)
		if err != nil {
			return err
		}
		quiet := time.Since(quietFrom)
		cur, at, err := r.scrapeActivity(ctx)
		if err != nil {
			return err
		}
		b := measureBusyness(prev, cur, cpuEnd.CPU-cpuStart.CPU, quiet, at.Sub(prevAt))
		waited := time.Since(began)
		switch {
		case b.idle():
			if waited > 3*idleWindow {
				r.progress.say("Temporal idle after %s", waited.Round(time.Second))
			}
			return nil
		case waited > idleMax:
			r.progress.say("Temporal still busy after %s (%s): measuring anyway", idleMax, b)
			return nil
		}
		r.progress.live(fmt.Sprintf("waiting for Temporal to go idle: %s (%s)", b, clock(waited.Round(time.Second))))
		prev, prevAt = cur, at
	}
}

// scrapeActivity reads the server's activity counters and when.
func (r *runner) scrapeActivity(ctx context.Context) (serverActivity, time.Time, error) {
	m, err := r.scrapeTemporal(ctx)
	if err != nil {
		return serverActivity{}, time.Time{}, err
	}
	return activityOf(m, namespace), time.Now(), nil
}
