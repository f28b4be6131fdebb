package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/workflows"
)

// Snapshot is one look at Ferry.
type Snapshot struct {
	At        time.Time `json:"at"`
	Namespace string    `json:"namespace"`
	TaskQueue string    `json:"task_queue"`
	// Backlog: rows not yet published, by status.
	Backlog []StatusCount `json:"backlog"`
	// Published in the last minute and the last hour.
	PublishedLastMinute int64     `json:"published_last_minute"`
	PublishedLastHour   int64     `json:"published_last_hour"`
	Blocked             []Blocked `json:"blocked"`
	Retention           *Run      `json:"retention,omitempty"`
	Reconcile           *Run      `json:"reconcile,omitempty"`
}

// StatusCount is the backlog of one status.
type StatusCount struct {
	Status    string        `json:"status"`
	Count     int64         `json:"count"`
	OldestAge time.Duration `json:"oldest_age_ns"`
}

// Blocked is one aggregate held at a quarantined event.
type Blocked struct {
	WorkflowID string    `json:"workflow_id"`
	EventID    string    `json:"event_id"`
	EventType  string    `json:"event_type"`
	ErrorClass string    `json:"error_class"`
	Since      time.Time `json:"since"`
}

// Run is the last run of a maintenance schedule.
type Run struct {
	Last time.Time `json:"last,omitempty"`
	Next time.Time `json:"next,omitempty"`
}

const sqlBacklog = `
SELECT status, count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)
FROM outbox_events WHERE status <> 'published'
GROUP BY status ORDER BY status`

// sqlThroughput reads recent publications; published rows are the bulk of
// the table and have no index on published_at, so this is a command for a
// person, not for a scraper (use /metrics there).
const sqlThroughput = `
SELECT count(*) FILTER (WHERE published_at > now() - interval '1 minute'),
       count(*)
FROM outbox_events WHERE status = 'published' AND published_at > now() - interval '1 hour'`

// Collect reads a Snapshot from PostgreSQL and Temporal.
func Collect(ctx context.Context, pool *pgxpool.Pool, c client.Client, namespace, taskQueue string) (Snapshot, error) {
	s := Snapshot{At: time.Now().UTC(), Namespace: namespace, TaskQueue: taskQueue}
	rows, err := pool.Query(ctx, sqlBacklog)
	if err != nil {
		return s, fmt.Errorf("read backlog: %w", err)
	}
	s.Backlog, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StatusCount, error) {
		var sc StatusCount
		var age float64
		err := r.Scan(&sc.Status, &sc.Count, &age)
		sc.OldestAge = time.Duration(age * float64(time.Second))
		return sc, err
	})
	if err != nil {
		return s, fmt.Errorf("read backlog: %w", err)
	}
	if err := pool.QueryRow(ctx, sqlThroughput).Scan(&s.PublishedLastMinute, &s.PublishedLastHour); err != nil {
		return s, fmt.Errorf("read throughput: %w", err)
	}
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: namespace,
		Query:     workflows.SABlocked + " = true AND ExecutionStatus = 'Running'",
		PageSize:  100,
	})
	if err != nil {
		return s, fmt.Errorf("list blocked workflows: %w", err)
	}
	for _, ex := range resp.Executions {
		b := Blocked{WorkflowID: ex.Execution.WorkflowId}
		fields := ex.GetSearchAttributes().GetIndexedFields()
		for name, dst := range map[string]any{workflows.SABlockedEventID: &b.EventID, workflows.SABlockedEventType: &b.EventType,
			workflows.SAErrorClass: &b.ErrorClass, workflows.SABlockedSince: &b.Since} {
			if p, ok := fields[name]; ok {
				_ = json.Unmarshal(p.GetData(), dst)
			}
		}
		s.Blocked = append(s.Blocked, b)
	}
	s.Retention = lastRun(ctx, c, workflows.RetentionScheduleID+"/"+taskQueue)
	s.Reconcile = lastRun(ctx, c, workflows.ReconcileScheduleID+"/"+taskQueue)
	return s, nil
}

func lastRun(ctx context.Context, c client.Client, id string) *Run {
	d, err := c.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
	if err != nil {
		return nil
	}
	r := &Run{}
	if n := len(d.Info.RecentActions); n > 0 {
		r.Last = d.Info.RecentActions[n-1].ActualTime
	}
	if len(d.Info.NextActionTimes) > 0 {
		r.Next = d.Info.NextActionTimes[0]
	}
	return r
}

// Render writes the snapshot for a person. color adds ANSI colours (only on
// a terminal).
func Render(w io.Writer, s Snapshot, color bool) {
	red, green, yellow, bold, reset := "", "", "", "", ""
	if color {
		red, green, yellow, bold, reset = "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[1m", "\x1b[0m"
	}
	fmt.Fprintf(w, "%sFerry status%s  namespace %s, task queue %s, at %s\n\n", bold, reset, s.Namespace, s.TaskQueue, s.At.Format(time.RFC3339))

	fmt.Fprintf(w, "%sBacklog%s (rows not yet published)\n", bold, reset)
	if len(s.Backlog) == 0 {
		fmt.Fprintf(w, "  %snone: everything committed is published%s\n", green, reset)
	}
	for _, b := range s.Backlog {
		c := ""
		if b.OldestAge > 5*time.Minute || b.Status == "quarantined" {
			c = yellow
		}
		fmt.Fprintf(w, "  %s%-12s %8d   oldest %s%s\n", c, b.Status, b.Count, age(b.OldestAge), reset)
	}

	fmt.Fprintf(w, "\n%sThroughput%s\n  published %d in the last minute, %d in the last hour\n", bold, reset, s.PublishedLastMinute, s.PublishedLastHour)

	fmt.Fprintf(w, "\n%sBlocked aggregates%s\n", bold, reset)
	if len(s.Blocked) == 0 {
		fmt.Fprintf(w, "  %snone%s\n", green, reset)
	}
	for _, b := range s.Blocked {
		fmt.Fprintf(w, "  %s%s%s at event %s (%s), %s, blocked %s\n", red, b.WorkflowID, reset, b.EventID, b.EventType, b.ErrorClass, age(s.At.Sub(b.Since)))
		fmt.Fprintf(w, "    retry after fixing the cause:  ferry repair %s --action retry --reason '…'\n", b.EventID)
		fmt.Fprintf(w, "    or give the event up:          ferry repair %s --action skip --reason '…'\n", b.EventID)
	}
	if len(s.Blocked) == 100 {
		fmt.Fprintln(w, "  (first 100; `ferry blocked` lists all)")
	}

	fmt.Fprintf(w, "\n%sMaintenance%s\n", bold, reset)
	fmt.Fprintf(w, "  retention: %s\n  reconcile: %s\n", s.Retention.describe(s.At), s.Reconcile.describe(s.At))
}

func (r *Run) describe(now time.Time) string {
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
	return strings.Join(parts, ", ")
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
