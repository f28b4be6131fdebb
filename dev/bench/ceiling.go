package bench

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"
)

// The ceiling workload measures the engine without Ferry: a trivial
// workflow, started once per ID, that completes at once. What the server
// takes of these per second is the most any workflow-per-aggregate design
// gets from it on this machine.
const (
	trivialWorkflowName = "ferry-bench.Trivial"
	// trivialTaskQueue is the ceiling's own: no Ferry worker polls it.
	trivialTaskQueue = "ferry-bench.Trivial"
	trivialSignal    = "ferry-bench.go"
	// ceilingStarters start workflows concurrently, as Ferry's poller
	// signals up to 16 aggregates at once.
	ceilingStarters = 16
	// ceilingPollers are the worker's workflow task pollers, Ferry's
	// worker's default.
	ceilingPollers = 8
)

// Ceiling variants: how each workflow is started.
const (
	// ceilingSWS starts by Signal-With-Start, as Ferry's poller does.
	ceilingSWS = "signal-with-start"
	// ceilingEager starts with StartWorkflow and EnableEagerStart: the
	// server hands the first workflow task back in the start's response to
	// the worker on the same client, skipping matching.
	ceilingEager = "eager start"
)

// ceilingVariants run in this order in every rep.
var ceilingVariants = []string{ceilingSWS, ceilingEager}

// ceilingWorkflows is how many workflows one ceiling run starts: the
// one-per-agg workload's aggregate count, so both start as many runs.
func ceilingWorkflows(scale float64) int { return shapeOf(WorkloadOnePerAgg, scale).aggregates }

// trivial is the ceiling's workflow and its completion count.
type trivial struct {
	done atomic.Int64
	last atomic.Int64 // UnixNano of the latest completion
}

// run takes the start's signal, if any, and completes. The count is the
// bench's stopwatch outside the workflow's state, kept off replays; the
// workflow never reads it, so its history is the same either way.
func (t *trivial) run(ctx workflow.Context) error {
	workflow.GetSignalChannel(ctx, trivialSignal).ReceiveAsync(nil)
	if !workflow.IsReplaying(ctx) {
		t.last.Store(time.Now().UnixNano())
		t.done.Add(1)
	}
	return nil
}

// CeilingRun is one ceiling run: N trivial workflows started and
// completed.
type CeilingRun struct {
	Variant   string `json:"variant"`
	Rep       int    `json:"rep"`
	Workflows int    `json:"workflows"`
	Completed int    `json:"completed"`
	// ElapsedSeconds: the first start to the last completion (the workflow
	// function returning in the worker).
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Rate is Completed / ElapsedSeconds.
	Rate     float64     `json:"workflows_per_second"`
	Temporal ProcFigures `json:"temporal"`
	Server   *ServerCost `json:"server,omitempty"`
	Problem  string      `json:"problem,omitempty"`
}

// ceilingOnce runs one variant of the ceiling once.
func (r *runner) ceilingOnce(ctx context.Context, variant string, rep int) (CeilingRun, error) {
	r.seq++
	n := ceilingWorkflows(r.cfg.Scale)
	res := CeilingRun{Variant: variant, Rep: rep, Workflows: n}
	r.progress.step("%s · %s · rep %d/%d: %s trivial workflows, %d starters", WorkloadCeiling, variant, rep, r.cfg.Reps, count(n), ceilingStarters)
	if err := r.waitIdle(ctx); err != nil {
		return res, err
	}
	t := &trivial{}
	w := worker.New(r.tc, trivialTaskQueue, worker.Options{MaxConcurrentWorkflowTaskPollers: ceilingPollers})
	w.RegisterWorkflowWithOptions(t.run, workflow.RegisterOptions{Name: trivialWorkflowName})
	if err := w.Start(); err != nil {
		return res, fmt.Errorf("start the ceiling's worker: %w", err)
	}
	defer w.Stop()

	pids := r.temporalPids()
	if err := resetPeaks(pids); err != nil {
		r.progress.say("Temporal peak memory covers the whole bench: %v", err)
	}
	before := r.scrapeCost(ctx)
	cpuStart, err := readProcs(pids)
	if err != nil {
		return res, err
	}
	began := time.Now()
	startErr := make(chan error, 1)
	go func() { startErr <- r.startTrivial(ctx, variant, n) }()
	started := false
	lastDone, lastChange := int64(0), time.Now()
	for t.done.Load() < int64(n) {
		if !started {
			select {
			case err := <-startErr:
				if err != nil {
					return res, err
				}
				started = true
			default:
			}
		}
		if d := t.done.Load(); d != lastDone {
			lastDone, lastChange = d, time.Now()
		}
		if started && time.Since(lastChange) > r.cfg.StallTimeout {
			res.Problem = fmt.Sprintf("nothing completed for %s: stopped waiting with %s of %s workflows completed", r.cfg.StallTimeout, count(int(lastDone)), count(n))
			break
		}
		r.progress.live(fmt.Sprintf("completed %s / %s (%s/s over %s)", count(int(lastDone)), count(n),
			count(int(float64(lastDone)/time.Since(began).Seconds())), clock(time.Since(began).Round(time.Second))))
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return res, ctx.Err()
		}
	}
	if !started {
		if err := <-startErr; err != nil {
			return res, err
		}
	}
	cpuEnd, err := readProcs(pids)
	if err != nil {
		return res, err
	}
	res.Completed = int(t.done.Load())
	if res.Completed > 0 {
		res.ElapsedSeconds = time.Unix(0, t.last.Load()).Sub(began).Seconds()
		res.Rate = float64(res.Completed) / res.ElapsedSeconds
	}
	res.Temporal = procFigures(cpuStart, cpuEnd, res.Completed)
	if err := r.waitIdle(ctx); err != nil {
		return res, err
	}
	res.Server = r.costSince(ctx, before)
	if s := res.Server; s != nil && res.Problem == "" && int(s.RunsCompleted) != n {
		res.Problem = fmt.Sprintf("the server counted %s runs completed, want %s", count(int(s.RunsCompleted)), count(n))
	}
	r.progress.done("%s", res.oneLine())
	return res, nil
}

// startTrivial starts n trivial workflows with ceilingStarters concurrent
// starters. IDs are new for every run.
func (r *runner) startTrivial(ctx context.Context, variant string, n int) error {
	ids := make(chan string)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(ids)
		for i := range n {
			select {
			case ids <- fmt.Sprintf("ferry-bench/ceiling/%d/%s", r.seq, aggregateID(i)):
			case <-gctx.Done():
				return nil
			}
		}
		return nil
	})
	for range ceilingStarters {
		g.Go(func() error {
			for id := range ids {
				opts := client.StartWorkflowOptions{ID: id, TaskQueue: trivialTaskQueue}
				var err error
				if variant == ceilingEager {
					opts.EnableEagerStart = true
					_, err = r.tc.ExecuteWorkflow(gctx, opts, trivialWorkflowName)
				} else {
					_, err = r.tc.SignalWithStartWorkflow(gctx, id, trivialSignal, nil, opts, trivialWorkflowName)
				}
				if err != nil {
					return fmt.Errorf("start %s (%s): %w", id, variant, err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

func (c CeilingRun) oneLine() string {
	s := fmt.Sprintf("%s workflows in %s: %s workflows/s", count(c.Completed), round(time.Duration(c.ElapsedSeconds*float64(time.Second))), count(int(math.Round(c.Rate))))
	if sc := c.Server; sc != nil && c.Completed > 0 {
		n := float64(c.Completed)
		s += fmt.Sprintf("; per workflow %.2f state transitions, %.2f billed actions, %.2f visibility writes", sc.StateTransitions/n, sc.Actions/n, sc.VisibilityWrites/n)
		if sc.EagerStarts > 0 {
			s += fmt.Sprintf("; %.0f%% started eagerly", 100*sc.EagerStarts/n)
		}
	}
	if c.Problem != "" {
		s += "; " + c.Problem
	}
	return s
}
