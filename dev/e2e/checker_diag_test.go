package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/ferry-outbox/ferry/internal/pgtext"
	"github.com/ferry-outbox/ferry/workflows"
)

// diagnose says where the events the checker misses are stuck, for the
// failure output: every committed event not on the tap or without an
// effect, with its outbox row (status, attempts, lease, last error), the
// aggregate's delivered version, what the consumer noted for it, and the
// aggregate workflow as Temporal sees it (status, pending activities with
// their attempts and last failure, the workflow's own state, and earlier
// runs that failed, with their failure), and the server's sessions. It reads
// with short timeouts and reports what it cannot read instead of failing:
// it runs when something already went wrong.
func (c *checker) diagnose(want []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	fmt.Fprintf(&b, "diagnosis at %s:\n", time.Now().UTC().Format("15:04:05.000"))

	c.tap.mu.Lock()
	var notOnTap []string
	for _, id := range want {
		if !c.tap.seen[id] {
			notOnTap = append(notOnTap, id)
		}
	}
	c.tap.mu.Unlock()
	var noEffect []string
	rows, err := c.e.db.Pool.Query(ctx, `SELECT w FROM unnest($1::text[]) w
		WHERE NOT EXISTS (SELECT 1 FROM checker_effects ef WHERE ef.event_id = w)`, want)
	if err == nil {
		noEffect, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		fmt.Fprintf(&b, "  cannot read the effects: %v\n", err)
	}
	fmt.Fprintf(&b, "  %d of %d committed events not on the tap, %d without an effect\n", len(notOnTap), len(want), len(noEffect))

	var byStatus []string
	rows, err = c.e.db.Pool.Query(ctx, `SELECT status || ' ' || count(*) FROM outbox_events GROUP BY status ORDER BY status`)
	if err == nil {
		byStatus, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		fmt.Fprintf(&b, "  cannot read outbox_events: %v\n", err)
	} else {
		fmt.Fprintf(&b, "  outbox_events by status: %s\n", strings.Join(byStatus, ", "))
	}

	// The server's sessions: who holds connections, idle in a
	// transaction or waiting for a lock.
	var sessions []string
	rows, err = c.e.db.Pool.Query(ctx, `SELECT s || ' ×' || count(*) FROM (
			SELECT coalesce(nullif(application_name, ''), backend_type) || ' ' || coalesce(state, '-') ||
				coalesce(' waiting ' || wait_event_type || '/' || wait_event, '') AS s
			FROM pg_stat_activity WHERE pid <> pg_backend_pid()) a
		GROUP BY s ORDER BY s`)
	if err == nil {
		sessions, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		fmt.Fprintf(&b, "  cannot read pg_stat_activity: %v\n", err)
	} else {
		fmt.Fprintf(&b, "  sessions: %s\n", strings.Join(sessions, "; "))
	}

	// The rows in question, and every row that is not published.
	ids := slices.Concat(notOnTap, noEffect)
	aggs := map[string]bool{}
	fmt.Fprintf(&b, "  %-36s %-8s %4s %-11s %3s %-10s %7s %-12s %-12s %5s %-3s %s\n", "event", "agg", "ver", "status", "att",
		"claimed_by", "lease_s", "dispatched", "published", "deliv", "tap", "consumer / last_error")
	rows, err = c.e.db.Pool.Query(ctx, `SELECT e.id::text, e.aggregate_id, e.aggregate_version, e.status, e.attempts,
			coalesce(e.claimed_by, ''), round(extract(epoch FROM e.next_attempt_at - now())::numeric, 1)::text,
			coalesce(to_char(e.dispatched_at, 'HH24:MI:SS.MS'), '-'), coalesce(to_char(e.published_at, 'HH24:MI:SS.MS'), '-'),
			coalesce(e.last_error, ''), coalesce(a.delivered_version, -1),
			coalesce((SELECT string_agg(d.outcome || '#' || d.deliveries, ',') FROM checker_deliveries d WHERE d.event_id = e.id::text), '')
		FROM outbox_events e
		LEFT JOIN outbox_aggregates a ON a.aggregate_type = e.aggregate_type AND a.aggregate_id = e.aggregate_id
		WHERE e.id::text = ANY($1) OR e.status <> 'published'
		ORDER BY e.aggregate_id, e.aggregate_version LIMIT 200`, ids)
	if err == nil {
		var (
			id, agg, status, claimedBy, lease, dispatched, published, lastErr, consumer string
			version, delivered                                                          int64
			attempts                                                                    int
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &agg, &version, &status, &attempts, &claimedBy, &lease, &dispatched, &published,
			&lastErr, &delivered, &consumer}, func() error {
			aggs[agg] = true
			tap := "no"
			c.tap.mu.Lock()
			if c.tap.seen[id] {
				tap = "yes"
			}
			c.tap.mu.Unlock()
			note := consumer
			if lastErr != "" {
				note += " / " + truncateDiag(lastErr, 200)
			}
			fmt.Fprintf(&b, "  %-36s %-8s %4d %-11s %3d %-10s %7s %-12s %-12s %5d %-3s %s\n", id, agg, version, status, attempts,
				truncateDiag(claimedBy, 10), lease, dispatched, published, delivered, tap, note)
			return nil
		})
	}
	if err != nil {
		fmt.Fprintf(&b, "  cannot read the rows: %v\n", err)
	}

	// The aggregate workflows of those rows, as Temporal sees them.
	names := make([]string, 0, len(aggs))
	for a := range aggs {
		names = append(names, a)
	}
	slices.Sort(names)
	for _, agg := range names {
		wfID := workflows.WorkflowID(c.e.aggType, agg)
		fmt.Fprintf(&b, "  workflow %s: %s\n", agg, c.describeWorkflow(ctx, wfID))
	}
	return b.String()
}

// describeWorkflow is one line (and its pending activities) about the
// latest run of wfID.
func (c *checker) describeWorkflow(ctx context.Context, wfID string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := c.temporal.DescribeWorkflowExecution(ctx, wfID, "")
	if err != nil {
		return fmt.Sprintf("cannot describe: %v", err)
	}
	info := d.GetWorkflowExecutionInfo()
	status := strings.TrimPrefix(info.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")
	s := fmt.Sprintf("run %s %s, history %d events", info.GetExecution().GetRunId(), status, info.GetHistoryLength())
	for _, pa := range d.GetPendingActivities() {
		s += fmt.Sprintf("\n      pending activity %s: %s, attempt %d, last failure: %s", pa.GetActivityType().GetName(),
			strings.TrimPrefix(pa.GetState().String(), "PENDING_ACTIVITY_STATE_"), pa.GetAttempt(),
			truncateDiag(pa.GetLastFailure().GetMessage(), 300))
	}
	// Earlier runs: one that failed or timed out left its events behind.
	resp, err := c.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: c.ns, Query: fmt.Sprintf("WorkflowId = '%s'", wfID), PageSize: 20,
	})
	if err != nil {
		s += fmt.Sprintf("\n      runs: cannot list: %v", err)
	}
	for _, ex := range resp.GetExecutions() {
		runID := ex.GetExecution().GetRunId()
		if runID == info.GetExecution().GetRunId() {
			continue
		}
		s += fmt.Sprintf("\n      earlier run %s %s", runID, strings.TrimPrefix(ex.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))
		switch ex.GetStatus() {
		case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
			it := c.temporal.GetWorkflowHistory(ctx, wfID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
			if it.HasNext() {
				if ev, err := it.Next(); err == nil {
					if f := ev.GetWorkflowExecutionFailedEventAttributes().GetFailure(); f != nil {
						s += ": " + truncateDiag(f.GetMessage(), 300)
					}
				}
			}
		}
	}
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		v, err := c.temporal.QueryWorkflow(ctx, wfID, "", workflows.StateQuery)
		var st workflows.State
		if err == nil {
			err = v.Get(&st)
		}
		if err != nil {
			s += fmt.Sprintf("\n      state: cannot query: %v", err)
		} else {
			s += fmt.Sprintf("\n      state: delivered %d, pending %v, publishing %d, blocked %v", st.Delivered, st.Pending, st.Publishing, st.Blocked)
		}
	}
	return s
}

func truncateDiag(s string, n int) string {
	if len(s) > n {
		return pgtext.Truncate(s, n) + "…"
	}
	return s
}

// runStatuses counts the runs of the aggregate workflows the workload
// touched, by status ("Completed", "Running", "Failed", …): a run that
// failed left the events it held to no one.
func (c *checker) runStatuses(ctx context.Context) map[string]int {
	t := c.t
	out := map[string]int{}
	for _, agg := range c.touchedAggregates() {
		wfID := workflows.WorkflowID(c.e.aggType, agg)
		var token []byte
		for {
			resp, err := c.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
				Namespace: c.ns, Query: fmt.Sprintf("WorkflowId = '%s'", wfID), NextPageToken: token,
			})
			if err != nil {
				t.Errorf("list the runs of %s: %v", wfID, err)
				return out
			}
			for _, ex := range resp.Executions {
				status := strings.TrimPrefix(ex.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")
				out[strings.ToUpper(status[:1])+strings.ToLower(status[1:])]++
			}
			token = resp.NextPageToken
			if len(token) == 0 {
				break
			}
		}
	}
	return out
}
