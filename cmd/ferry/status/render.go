package status

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/workflows"
)

// Render writes the snapshot for a person. color adds ANSI colours (only on
// a terminal).
func Render(w io.Writer, s Snapshot, color bool) {
	red, green, yellow, bold, reset := "", "", "", "", ""
	if color {
		red, green, yellow, bold, reset = "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[1m", "\x1b[0m"
	}
	fmt.Fprintf(w, "%sFerry status%s  namespace %s, task queue %s, at %s\n", bold, reset, s.Namespace, s.TaskQueue, s.At.Format(time.RFC3339))
	if s.Temporal != nil {
		fmt.Fprintf(w, "  %s\n", s.Temporal)
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "%sBacklog%s (rows not yet delivered)\n", bold, reset)
	if len(s.Backlog) == 0 {
		fmt.Fprintf(w, "  %snone: everything committed is delivered%s\n", green, reset)
	}
	for _, b := range s.Backlog {
		if b.Status == "delayed" {
			fmt.Fprintf(w, "  %-12s %8d   waiting for their delivery time, the first due in %s\n", b.Status, b.Count, age(b.NextDue))
			continue
		}
		c := ""
		if b.OldestAge > 5*time.Minute || b.Status == "quarantined" {
			c = yellow
		}
		fmt.Fprintf(w, "  %s%-12s %8d   oldest %s%s\n", c, b.Status, b.Count, age(b.OldestAge), reset)
	}

	fmt.Fprintf(w, "\n%sThroughput%s\n  published %d in the last minute, %d in the last hour\n", bold, reset, s.PublishedLastMinute, s.PublishedLastHour)
	s.Lane.render(w, s.At, bold, yellow, red, reset)
	s.WALSlot.render(w, bold, red, reset)

	fmt.Fprintf(w, "\n%sBlocked aggregates%s\n", bold, reset)
	if len(s.Blocked) == 0 {
		fmt.Fprintf(w, "  %snone%s\n", green, reset)
	}
	for _, b := range s.Blocked {
		fmt.Fprintf(w, "  %s%s%s at event %s (%s), %s, blocked %s\n", red, b.WorkflowID, reset, b.EventID, b.EventType, b.ErrorClass, age(s.At.Sub(b.Since)))
		fmt.Fprintf(w, "    retry after fixing the cause:  ferry repair %s --action retry --reason '…'\n", b.EventID)
		fmt.Fprintf(w, "    or give the event up:          ferry repair %s --action skip --reason '…'\n", b.EventID)
	}
	if s.BlockedTruncated {
		fmt.Fprintf(w, "  (the first %d; `ferry blocked` lists all)\n", len(s.Blocked))
	}
	if len(s.Unheld) > 0 {
		fmt.Fprintf(w, "\n%sQuarantined without a workflow%s (no run holds them; `ferry repair` applies directly)\n", bold, reset)
	}
	for _, u := range s.Unheld {
		fmt.Fprintf(w, "  %s%s%s v%d event %s (%s), %s, committed %s ago\n", red, u.Aggregate(), reset, u.Version, u.EventID, u.EventType, u.ErrorClass, age(s.At.Sub(u.CreatedAt)))
		fmt.Fprintf(w, "    give the event up:  ferry repair %s --action skip --reason '…'\n", u.EventID)
	}
	if s.UnheldTruncated {
		fmt.Fprintf(w, "  (the first %d; `ferry blocked` lists all)\n", len(s.Unheld))
	}

	fmt.Fprintf(w, "\n%sEffects waiting on reconciliation%s (outcome unknown)\n", bold, reset)
	if len(s.EffectsWaiting) == 0 {
		fmt.Fprintf(w, "  %snone%s\n", green, reset)
	}
	for i, e := range s.EffectsWaiting {
		if i == maxEffectLines {
			fmt.Fprintf(w, "  (%d more; `ferry status --json` lists all)\n", len(s.EffectsWaiting)-i)
			break
		}
		known := !e.Since.IsZero()
		if e.Phase != effects.PhaseEscalated {
			since := ""
			if known {
				since = " for " + age(s.At.Sub(e.Since))
			}
			fmt.Fprintf(w, "  %s%s%s reconciling, outcome unknown%s: it looks the outcome up itself; nothing to do yet\n", yellow, e.WorkflowID, reset, since)
			continue
		}
		since := ""
		if known {
			since = " " + age(s.At.Sub(e.Since)) + " ago"
		}
		fmt.Fprintf(w, "  %s%s%s escalated (%s)%s, waiting for an operator\n", red, e.WorkflowID, reset, e.ErrorClass, since)
		fmt.Fprintf(w, "    see what it knows:  temporal workflow query --workflow-id '%s' --type %s\n", e.WorkflowID, effects.StateQuery)
		fmt.Fprintf(w, "    decide:             temporal workflow signal --workflow-id '%s' --name %s \\\n", e.WorkflowID, effects.ResolveSignal)
		fmt.Fprintf(w, "                          --input '{\"action\":\"succeeded|failed|resend|lookup\",\"actor\":\"<you>\",\"reason\":\"…\"}'\n")
	}
	if s.EffectsTruncated {
		fmt.Fprintln(w, "  (among the first 1000 running effect workflows; the Temporal UI lists all: FerryBlocked = true)")
	}

	fmt.Fprintf(w, "\n%sMaintenance%s\n", bold, reset)
	fmt.Fprintf(w, "  retention: %s\n", s.Retention.describe(s.At, retentionSummary))
	fmt.Fprintf(w, "  reconcile: %s\n", s.Reconcile.describe(s.At, reconcileSummary))
	if r := s.Reconcile; r != nil && r.Result != nil && r.Result.Drift != nil {
		for i, d := range r.Result.Drift.Drifted {
			if i == 5 {
				fmt.Fprintf(w, "    (%d more in the last ferry.Reconcile run's result)\n", len(r.Result.Drift.Drifted)-i)
				break
			}
			fmt.Fprintf(w, "    %s%s%s %s: %s\n      %s\n", yellow, d.WorkflowID, reset, d.Kind, d.Differs, d.Action)
		}
	}
}

func retentionSummary(r workflows.RetentionResult) string {
	s := fmt.Sprintf("deleted %d delivered rows", r.Deleted)
	if r.PayloadsPurged > 0 {
		s += fmt.Sprintf(", blanked %d payloads", r.PayloadsPurged)
	}
	return s
}

func reconcileSummary(r workflows.ReconcileResult) string {
	s := fmt.Sprintf("re-dispatched %d rows", r.Redispatched)
	if r.Unchecked > 0 {
		s += fmt.Sprintf(" (%d open runs did not answer)", r.Unchecked)
	}
	if d := r.Drift; d != nil {
		s += fmt.Sprintf("; drift check: %d of %d sampled aggregates drifted", len(d.Drifted), d.Sampled)
		if d.Unchecked > 0 {
			s += fmt.Sprintf(", %d did not answer", d.Unchecked)
		}
	}
	return s
}

func (r *Run[T]) describe(now time.Time, summary func(T) string) string {
	if r == nil {
		return "no schedule (a worker with schedules on creates it)"
	}
	var parts []string
	if r.Last.IsZero() {
		parts = append(parts, "not run yet")
	} else {
		parts = append(parts, "last run "+age(now.Sub(r.Last))+" ago")
	}
	if !r.Next.IsZero() {
		parts = append(parts, "next in "+age(r.Next.Sub(now)))
	}
	out := strings.Join(parts, ", ")
	if r.Result != nil {
		out += "; last completed: " + summary(*r.Result)
	}
	return out
}

func age(d time.Duration) string {
	switch {
	case d < time.Second:
		return "<1s"
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

// render writes the lane's section: which lane the relays run, and in the
// publish-first lane the aggregates handed to workflows.
func (l Lane) render(w io.Writer, now time.Time, bold, yellow, red, reset string) {
	fmt.Fprintf(w, "\n%sLane%s\n", bold, reset)
	if len(l.Relays) == 0 {
		fmt.Fprintf(w, "  no relay registered (none runs, or all are older than this schema)\n")
		return
	}
	lanes := map[string]bool{}
	for _, r := range l.Relays {
		if r.Seen < 30*time.Second {
			lanes[r.Lane] = true
		}
	}
	fmt.Fprintf(w, "  %s: %d relay(s) registered\n", l.Lane, len(l.Relays))
	for _, r := range l.Relays {
		gone := ""
		if r.Seen >= 30*time.Second {
			gone = " (gone: not seen for 30s)"
		}
		fmt.Fprintf(w, "    %s  %s, source %s, seen %s ago%s\n", r.Name, r.Lane, r.Source, age(r.Seen), gone)
	}
	if len(lanes) > 1 {
		fmt.Fprintf(w, "  %srelays of two lanes are alive: stop one lane's relays (a relay of the other lane is refused at start)%s\n", red, reset)
	}
	if l.Lane != "publish-first" && l.WorkflowOwned == 0 {
		return
	}
	fmt.Fprintf(w, "  published directly right now: %d aggregate(s) under a relay's lease\n", l.RelayLeases)
	if l.WorkflowOwned == 0 {
		fmt.Fprintf(w, "  in their workflows: none (every aggregate is the lane's)\n")
		return
	}
	fmt.Fprintf(w, "  %sin their workflows: %d aggregate(s)%s (handed over after a failed publish, an event that needs the workflow, or a repair; each returns to the lane when its run released it)\n",
		yellow, l.WorkflowOwned, reset)
	for _, o := range l.Owned {
		fmt.Fprintf(w, "    %s  %s, epoch %d, for %s: temporal workflow describe -w '%s'\n", o.WorkflowID, o.Cause, o.Epoch, age(now.Sub(o.Since)), o.WorkflowID)
	}
	if int64(len(l.Owned)) < l.WorkflowOwned {
		fmt.Fprintf(w, "    (the %d held longest of %d)\n", len(l.Owned), l.WorkflowOwned)
	}
}
