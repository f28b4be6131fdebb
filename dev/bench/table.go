package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints the results for people.
func (res *Results) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nFerry (bin/ferry run + embedded Temporal on %s) in both lanes vs. a plain relay (SKIP LOCKED → confirms → mark):\n", res.Config.temporalPersistence())
	fmt.Fprintf(w, "ferry = bin/ferry run (--lane workflow, the default: every event through its aggregate's workflow); publish-first = bin/ferry run\n"+
		"--lane publish-first (the relay publishes, an aggregate's workflow only after a failure or for an event that needs it); plain = the plain relay.\n")
	if res.Config.privateCluster() {
		fmt.Fprintf(w, "Ferry with each relay source: ferry-poll, publish-first (--source poll, as shipped) and ferry-wal, publish-first-wal (--source wal, log tailing);\n"+
			"every system on a PostgreSQL cluster of the bench's own (wal_level=logical).\n")
	}
	fmt.Fprintf(w, "Medians of %d run(s) per workload and system; %d CPUs (%s), load %s at start; took %s.\n",
		res.Config.Reps, res.Machine.CPUs, res.Machine.CPUModel, res.Machine.LoadAtStart, clock(res.Duration.Round(time.Second)))

	if len(res.Workloads) > 0 {
		fmt.Fprintf(w, "\nThroughput and latency (commit → received by the consumer):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		bound := false
		fmt.Fprintf(tw, "%-12s\t%-11s\tevents\tevents/s\tp50\tp95\tp99\tmax\tlost\tdup\tdisorder\t\n", "workload", "system")
		for _, ws := range res.Workloads {
			for _, s := range ws.ran() {
				eps := count(int(math.Round(s.Throughput)))
				if s.producerBound() && !strings.HasPrefix(ws.Name, "steady") {
					eps = "‡" + eps
					bound = true
				}
				fmt.Fprintf(tw, "%-12s\t%-11s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t\n", s.label, s.name, count(s.Events), eps,
					dur(s.Latency.P50), dur(s.Latency.P95), dur(s.Latency.P99), dur(s.Latency.Max), s.Lost, s.Duplicates, s.OutOfOrder)
			}
			if ws.Ferry != nil && ws.Plain != nil {
				fmt.Fprintf(tw, "%-12s\t%-11s\t\t%.2f×\t\t\t%.1f×\t\t\t\t\t\n", "", ws.label(SystemFerry)+"/plain", ws.ThroughputRatio, ws.P99Ratio)
			}
			if ws.Lane != nil && ws.Plain != nil {
				fmt.Fprintf(tw, "%-12s\t%-11s\t\t%.2f×\t\t\t%.1f×\t\t\t\t\t\n", "", SystemLane+"/plain", ws.LaneThroughputRatio, ws.LaneP99Ratio)
			}
			if ws.FerryWAL != nil && ws.Ferry != nil {
				fmt.Fprintf(tw, "%-12s\t%-11s\t\t%.2f×\t\t\t%.1f×\t\t\t\t\t\n", "", "wal/poll", ws.WALThroughputRatio, ws.WALP99Ratio)
			}
		}
		tw.Flush()
		if bound {
			fmt.Fprintf(w, "  ‡ the relay finished within 25%% of the producer's own time: this is the producer's rate, not the relay's limit\n")
		}
		for _, ws := range res.Workloads {
			sh := shapeOf(ws.Name, res.Config.Scale)
			if sh.destination {
				fmt.Fprintf(w, "  %s: received = the row marked published (Ferry: after Temporal took the start; plain: after RabbitMQ's confirm), for every system\n", ws.Name)
			}
			if sh.destination && !sh.noBroker && ws.Lane != nil {
				fmt.Fprintf(w, "  %s publish-first: every event needs the workflow (its destination), so the lane hands each aggregate to its workflow at once\n"+
					"    (cause NeedsWorkflow), which publishes and starts on the regular, retrying activity: the cost of a destination in the lane\n", ws.Name)
			}
			if sh.noBroker && slices.Contains(res.Config.Systems, SystemLane) {
				fmt.Fprintf(w, "  %s: not run in publish-first, which publishes to RabbitMQ (ferry refuses --no-broker with it)\n", ws.Name)
			}
			if sh.burst > 0 {
				fmt.Fprintf(w, "  %s: figures of the steady phase, which starts once the burst's %s events were received, with no wait for the server to go idle\n",
					ws.Name, count(sh.burst*burstEventsPerTx))
			}
		}
		for _, ws := range res.Workloads {
			for _, s := range ws.ran() {
				if s.Warm != nil {
					fmt.Fprintf(w, "  %s %s after the first %s (every aggregate's first event in it): p50 %s, p95 %s, p99 %s, max %s\n",
						ws.Name, s.name, WarmUp, dur(s.Warm.P50), dur(s.Warm.P95), dur(s.Warm.P99), dur(s.Warm.Max))
				}
			}
		}

		fmt.Fprintf(w, "\nCost per event (relay: the `ferry run` process, or the plain relay's; CPU over the run; peak RSS):\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		sampled := false
		fmt.Fprintf(tw, "%-12s\t%-11s\thistory ev/event\twf tasks/event\tCPU s/1k ev relay\tCPU s/1k ev Temporal\tpeak MiB relay\tpeak MiB Temporal\t\n", "workload", "system")
		for _, ws := range res.Workloads {
			for _, s := range ws.ran() {
				hist, wft := "–", "–"
				if s.history {
					hist, wft = fmt.Sprintf("%.2f", s.HistoryPerEvent), fmt.Sprintf("%.2f", s.WorkflowTasksPerEvent)
					if s.HistorySampled {
						sampled = true
						hist += "*"
						wft += "*"
					}
				}
				tcpu, tmem := "–", "–"
				if s.TemporalPeakMiB > 0 {
					tcpu, tmem = fmt.Sprintf("%.2f", s.TemporalCPUPer1k), fmt.Sprintf("%.0f", s.TemporalPeakMiB)
				}
				fmt.Fprintf(tw, "%-12s\t%-11s\t%s\t%s\t%.2f\t%s\t%.0f\t%s\t\n", s.label, s.name, hist, wft, s.RelayCPUPer1k, tcpu, s.RelayPeakMiB, tmem)
			}
		}
		tw.Flush()
		if sampled {
			fmt.Fprintf(w, "  * estimated from a uniform sample of %d aggregates per run (-history-sample)\n", res.Config.HistorySample)
		}
		fmt.Fprintf(w, "  History and the server's counts are read once the server went idle, at least %s after the last event arrived; the idle\n"+
			"  completion of aggregate workflows still open then (timer, one workflow task, completion: about 5 events per workflow run)\n"+
			"  is not in them. -settle 70s includes it.\n", res.Config.Settle)
		res.writeServerCost(w)
		res.writeLane(w)
		res.writePostgres(w)
	}
	res.writeCeiling(w)

	if c := res.Commit; c != nil {
		fmt.Fprintf(w, "\nProducer commit rate, %d clients, %gs per variant:\n", c.Clients, c.Seconds)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%-48s\tcommits/s\tcost\t\n", "transaction")
		fmt.Fprintf(tw, "%-48s\t%s\t\t\n", commitBusiness, count(int(c.BusinessOnly)))
		fmt.Fprintf(tw, "%-48s\t%s\t%.0f%%\t\n", commitOutbox, count(int(c.WithOutbox)), 100*c.OutboxCost)
		fmt.Fprintf(tw, "%-48s\t%s\t%.0f%%\t\n", commitNoNotify, count(int(c.WithOutboxNoNotify)), 100*c.OutboxCostNoNotify)
		if c.WithPlainRow > 0 {
			fmt.Fprintf(tw, "%-48s\t%s\t%.0f%%\t\n", commitPlainRow, count(int(c.WithPlainRow)), 100*c.PlainRowCost)
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\nTargets (medians of this run):\n")
	heading := ""
	for _, t := range res.Targets {
		if h := targetHeading(t.System); h != heading {
			heading = h
			fmt.Fprintf(w, "  %s\n", h)
		}
		fmt.Fprintf(w, "  %-7s  %s\n           got %s\n", t.Status, t.Goal, t.Got)
	}
	fmt.Fprintln(w)
	if len(res.Problems) == 0 {
		fmt.Fprintln(w, "Delivery checked: every committed event was received, in order within its aggregate.")
	} else {
		fmt.Fprintln(w, "DELIVERY FAILED:")
		for _, p := range res.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
}

// targetHeading groups the targets by whose they are.
func targetHeading(system string) string {
	if system == SystemLane {
		return "the publish-first lane (issue 24):"
	}
	return "the workflow lane (ferry):"
}

// writeLane prints where the publish-first lane's events went, and the
// handoff probe.
func (res *Results) writeLane(w io.Writer) {
	var rows []ranSystem
	for _, ws := range res.Workloads {
		first := true
		for _, s := range ws.ran() {
			if s.Lane == nil {
				continue
			}
			if first {
				s.label, first = ws.Name, false
			} else {
				s.label = ""
			}
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nWhere publish-first's events went (sums over the reps; the `ferry run` process's ferry_lane_* counters, first attempts from the rows):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-12s\t%-11s\tevents\tpublished directly\tat first attempt\tby workflows\thanded to workflows\tgiven back\tworkflows\t\n", "workload", "system")
	for _, s := range rows {
		l := s.Lane
		fmt.Fprintf(tw, "%-12s\t%-11s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.label, s.name, count(l.Events), count(l.Direct), count(l.FirstAttempt),
			count(l.ViaWorkflow), l.causes(), count(l.ToLane), count(l.Workflows))
	}
	tw.Flush()
	fmt.Fprintf(w, "  events: all of the reps' (a steady phase's burst included); handed to workflows: aggregates, by cause; workflows: runs on the run's task queue\n")
	if ws := res.workload(probeWorkload); ws != nil && ws.Lane != nil && ws.Lane.Probe != nil {
		fmt.Fprintf(w, "  handoff probe (%s): one unroutable event on an aggregate of its own, committed half way through the steady phase; its\n"+
			"    workflow's cost is in the run's server counts\n", probeWorkload)
	}
}

// producerBound: the relay finished within 25% of the producer's time, so
// its throughput is the producer's.
func (s *SystemSummary) producerBound() bool {
	return s.ProducerRate > 0 && s.Throughput >= 0.8*s.ProducerRate
}

// label is a variant's name in the tables: Ferry with --source poll is
// "ferry-poll" next to "ferry-wal", and "ferry" alone.
func (ws WorkloadSummary) label(variant string) string {
	if variant == SystemFerry && ws.FerryWAL != nil {
		return "ferry-poll"
	}
	return variant
}

// ranSystem is one system that ran a workload, as a table row: label is the
// workload's name on its first row, empty on the next; name is the
// variant's label.
type ranSystem struct {
	label, name string
	*SystemSummary
}

// ran lists the systems that ran the workload, Ferry first (poll, wal).
func (ws WorkloadSummary) ran() []ranSystem {
	var out []ranSystem
	for _, v := range variants {
		if s := ws.system(v); s != nil {
			label := ""
			if len(out) == 0 {
				label = ws.Name
			}
			out = append(out, ranSystem{label, ws.label(v), s})
		}
	}
	return out
}

// writePostgres prints PostgreSQL's work per event.
func (res *Results) writePostgres(w io.Writer) {
	measured, cpu := false, false
	for _, ws := range res.Workloads {
		for _, s := range ws.ran() {
			measured, cpu = measured || s.postgres, cpu || s.postgresCPU
		}
	}
	if !measured {
		return
	}
	fmt.Fprintf(w, "\nPostgreSQL per event (from emptied tables to 2s after the last event arrived, rows updated to the relay's stop; the producer's inserts included):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-12s\t%-11s\toutbox rows updated/ev\tof them HOT\tWAL bytes/ev\tCPU s/1k ev PostgreSQL\t\n", "workload", "system")
	for _, ws := range res.Workloads {
		for _, s := range ws.ran() {
			if !s.postgres {
				continue
			}
			c := "–"
			if s.postgresCPU {
				c = fmt.Sprintf("%.2f", s.PostgresCPUPer1k)
			}
			fmt.Fprintf(tw, "%-12s\t%-11s\t%.2f\t%.2f\t%s\t%s\t\n", s.label, s.name, s.OutboxUpdatesPerEvent, s.OutboxHOTUpdatesPerEvent, count(int(math.Round(s.WALBytesPerEvent))), c)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "  rows updated: pg_stat_user_tables.n_tup_upd of outbox_events (HOT updates included); WAL: pg_current_wal_lsn() difference, the whole cluster's\n")
	if cpu {
		fmt.Fprintf(w, "  CPU: utime + stime of the cluster's processes from /proc, ended backends included (the postmaster's cutime + cstime)\n")
	} else {
		fmt.Fprintf(w, "  CPU of PostgreSQL is measured only on the bench's own cluster (-sources with wal)\n")
	}
}

// oneLine is a run's outcome for the progress output.
func (r RunResult) oneLine() string {
	s := fmt.Sprintf("%s events in %s: %s events/s, p50 %s, p99 %s; lost %d, duplicates %d, out of order %d",
		count(r.Events), round(time.Duration(r.ElapsedSeconds*float64(time.Second))), count(int(math.Round(r.Throughput))),
		dur(r.Latency.P50), dur(r.Latency.P99), r.Verdict.Lost, r.Verdict.Duplicates, r.Verdict.OutOfOrder)
	if r.History != nil && r.Events > 0 {
		s += fmt.Sprintf("; %.2f history events/event", r.History.Events/float64(r.Events))
	}
	if p := r.Postgres; p != nil && r.Events > 0 {
		s += fmt.Sprintf("; PostgreSQL: %.2f outbox updates/event, %s WAL bytes/event", float64(p.RowsUpdated)/float64(r.Events), count(int(p.WALBytes)/r.Events))
		if p.CPUSeconds != nil {
			s += fmt.Sprintf(", %.2f CPU s/1k events", *p.CPUSeconds*1000/float64(r.Events))
		}
	}
	if r.Problem != "" {
		s += "; " + r.Problem
	}
	return s
}
