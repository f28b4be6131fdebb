package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/ferry-outbox/ferry/workflows"
)

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
	// received is how many events were delivered so far: received by the
	// consumer, or on a destination workload marked published (the
	// receipts go to the tally once the run is over, addMarks).
	received := tally.Received
	if s.destination {
		r.consumer.Count(nil) // what RabbitMQ gets is not what this workload times
	} else {
		r.consumer.Count(tally)
	}
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
	var dest *destWorker
	if s.destination && isFerry(system) {
		// Started before the first reading of the server's counts, as
		// the ceiling's: its first polls are not the run's work.
		d, err := startDestWorker(r.tc, destQueue(seq))
		if err != nil {
			return res, err
		}
		dest = d
		defer dest.stop()
	}
	var before *metricsReading
	if isFerry(system) && r.temporal != nil {
		before = r.scrapeCost(ctx)
	}
	extra := destinationEnv(s, aggType, seq)
	var laneMetrics string
	if system == SystemLane {
		addr, err := freeAddress()
		if err != nil {
			return res, err
		}
		laneMetrics = addr
		extra = append(extra, laneEnv(laneMetrics)...)
	}
	sys, err := r.startSystem(ctx, e, seq, extra)
	if err != nil {
		return res, err
	}
	defer func() { _ = sys.stop(30 * time.Second) }()
	if e.source == SourceWAL {
		defer func() {
			_ = sys.stop(30 * time.Second) // the slot is dropped once nobody reads it
			if err := r.dropSlot(context.WithoutCancel(ctx), system, seq); err != nil {
				r.progress.say("the run's replication slot is left (it keeps WAL until the cluster is removed at the end): %v", err)
			}
		}()
	}
	readyAt := time.Now()

	var temporalPids []int
	if isFerry(system) && r.temporal != nil {
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
	var marks *markWatch
	if s.destination {
		marks = watchMarks(sampleCtx, r.pool)
		received = marks.count
	}
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sleepCtx(sampleCtx, 500*time.Millisecond) {
			p := memPoint{Received: received()}
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
	// steadyFrom is when the steady phase after a burst began (s.burst);
	// written before produced is sent, read after it was received.
	var steadyFrom time.Time
	switch {
	case s.backlog:
		produced <- nil
	case s.burst > 0:
		go func() {
			b := burstShape(s.burst)
			if err := r.prod.produce(prodCtx, b, aggType, commits); err != nil {
				produced <- err
				return
			}
			r.awaitDelivered(prodCtx, received, b.events(0), sys)
			steadyFrom = time.Now()
			produced <- r.prod.produceSteady(prodCtx, s, r.cfg.SteadyDuration, aggType, commits)
		}()
	default:
		go func() {
			if s.rate > 0 {
				produced <- r.prod.produceSteady(prodCtx, s, r.cfg.SteadyDuration, aggType, commits)
			} else {
				produced <- r.prod.produce(prodCtx, s, aggType, commits)
			}
		}()
	}
	var probed chan *Probe
	if system == SystemLane && s.name == probeWorkload && r.tc != nil {
		// Half way through the steady phase; watched until it is listed
		// with its retrying activity, whether or not the run is over.
		probed = make(chan *Probe, 1)
		go func() {
			probed <- r.runProbe(ctx, aggType, r.cfg.SteadyDuration/2, commits.firstCommit)
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
		got := received()
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
	if marks != nil {
		<-marks.done
		rows, err := readMarks(ctx, r.pool)
		if err != nil {
			return res, err
		}
		addMarks(tally, aggType, rows)
	}
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
	if s.burst > 0 {
		// The steady phase's figures; the burst's events are checked
		// with the rest (verdict) and in the costs (allEvents).
		res.BurstEvents = res.Events - commits.since(steadyFrom)
		res.Events -= res.BurstEvents
		start = steadyFrom
		lat = tally.latenciesAfter(commits.at, steadyFrom)
		if !steadyFrom.IsZero() {
			res.ProduceSeconds = commits.last.Sub(steadyFrom).Seconds()
		}
	}
	if !last.IsZero() && !start.IsZero() {
		res.ElapsedSeconds = last.Sub(start).Seconds()
		res.Throughput = float64(res.Events-verdict.Lost) / res.ElapsedSeconds
	}
	res.Latency = Summarize(lat)
	// A run no longer than WarmUp has no events after it: no figure, not zeros.
	if after := tally.latenciesAfter(commits.at, start.Add(WarmUp)); s.rate > 0 && len(after) > 0 {
		warm := Summarize(after)
		res.Warm = &warm
	}
	res.latencies = lat
	res.Verdict = verdict
	if errSys == nil {
		res.Relay = procFigures(sysStart, sysEnd, res.allEvents())
	}
	if len(temporalPids) > 0 {
		f := procFigures(tempStart, tempEnd, res.allEvents())
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
	if dest != nil {
		// Marked published means Temporal took the start; the bench's
		// worker running every started workflow shows it did.
		want := res.Events - verdict.Lost
		if ran := dest.wait(ctx, want, r.cfg.StallTimeout); ran < want && res.Problem == "" {
			res.Problem = fmt.Sprintf("the destination's worker ran %s of the %s workflows started", count(ran), count(want))
		}
	}

	if probed != nil {
		res.Probe = <-probed
		if p := res.Probe; p.Problem != "" {
			r.progress.say("handoff probe: %s", p.Problem)
		} else {
			r.progress.say("handoff probe: an unroutable event committed %.0fs into the run was handed over after %s (%s), listed with a pending %s after %s, retrying after %s",
				p.AtSeconds, dur(p.Handed), p.Cause, workflows.PublishEventActivity, dur(p.Listed), dur(p.Retrying))
		}
	}
	// The run's workflows: every aggregate's in the workflow lane, the
	// handed-over ones' (and the probe's) in the publish-first lane, read
	// from visibility once the server is idle.
	workflowIDs := workflowIDsOf(aggType, s.aggregateIDs(res.allEvents()))
	if isFerry(system) && r.tc != nil {
		// The last workflow tasks complete just after the last publish.
		sleepCtx(ctx, r.cfg.Settle)
		if err := r.waitIdle(ctx); err != nil {
			return res, err
		}
		res.Server = r.costSince(ctx, before)
		aggIDs := s.aggregateIDs(res.allEvents())
		if system == SystemLane {
			if res.Lane, err = r.readLaneCounts(ctx, laneMetrics, aggType); err != nil {
				r.progress.say("the lane's counts of this run are not in the results: %v", err)
			}
			ids, err := queueWorkflows(ctx, r.tc, fmt.Sprintf("ferry-bench-%d", seq))
			if err != nil {
				r.progress.say("could not list this run's workflows (their histories are not counted, and those still open are not terminated): %v", err)
			}
			workflowIDs, aggIDs = ids, aggregatesOf(ids, aggType)
			if res.Lane != nil {
				res.Lane.Events, res.Lane.Workflows = res.allEvents(), len(ids)
			}
		}
		r.progress.say("reading Temporal histories of this run's aggregate workflows (%s)…", count(len(aggIDs)))
		hctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		h, err := countHistory(hctx, r.tc, aggType, aggIDs, r.cfg.HistorySample)
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
	if isFerry(system) && r.tc != nil && len(workflowIDs) > 0 {
		r.progress.say("terminating this run's open workflows (of %s), so their idle timeouts do not load the next run…", count(len(workflowIDs)))
		began := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		n, err := closeWorkflows(cctx, r.tc, workflowIDs)
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

// burstShape is the burst committed before the steady phase of a shape
// with burst aggregates.
func burstShape(aggregates int) shape {
	return shape{name: WorkloadBurst, aggregates: aggregates, eventsPerTx: burstEventsPerTx, txs: aggregates, payloadBytes: burstPayload}
}

// awaitDelivered waits until want events were received, or nothing new
// arrived for the stall timeout, or the system exited: the steady phase
// after a burst then goes ahead, and the run shows what is missing.
func (r *runner) awaitDelivered(ctx context.Context, received func() int, want int, sys *child) {
	last, lastChange := received(), time.Now()
	for last < want && time.Since(lastChange) < r.cfg.StallTimeout && !sys.exited() && sleepCtx(ctx, 10*time.Millisecond) {
		if n := received(); n != last {
			last, lastChange = n, time.Now()
		}
	}
}

// allEvents are the events the run committed, a steady phase's burst
// included: what its costs per event divide by.
func (r RunResult) allEvents() int { return r.Events + r.BurstEvents }

func procFigures(start, end ProcSample, events int) ProcFigures {
	cpu := (end.CPU - start.CPU).Seconds()
	f := ProcFigures{CPUSeconds: cpu, PeakMiB: mib(end.PeakRSS)}
	if events > 0 {
		f.CPUPer1k = cpu / float64(events) * 1000
	}
	return f
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
