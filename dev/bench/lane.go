package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/workflows"
)

// The publish-first lane as a system of the bench (SystemLane): the same
// bin/ferry run as SystemFerry, with FERRY_LANE=publish-first, on the same
// server, workloads and consumer. Its events mostly never reach Temporal,
// so besides the server's counts the bench reads where they went from the
// process's own metrics (FERRY_METRICS_ADDRESS, scraped before it stops):
// ferry_lane_published_total by path and ferry_lane_handoffs_total by
// direction and cause; and from the rows, how many were published at their
// first claim. Its workflows (an aggregate handed over, the probe's) are
// found by the run's task queue in visibility, read once the server went
// idle.

// Ferry's own metrics the bench reads from a SystemLane process
// (package metrics).
const (
	metricLanePublished = "ferry_lane_published"
	metricLaneHandoffs  = "ferry_lane_handoffs"
)

// LaneCounts is where one run's events went in the publish-first lane.
type LaneCounts struct {
	// Events are the run's events (a steady phase's burst included).
	Events int `json:"events"`
	// Direct and ViaWorkflow are the events the relay published itself
	// and those an aggregate workflow's activity published
	// (ferry_lane_published_total by path).
	Direct      int `json:"published_directly"`
	ViaWorkflow int `json:"published_by_workflows"`
	// ToWorkflow counts the aggregates handed to their workflows, by
	// cause (ferry_lane_handoffs_total, to_workflow: a failed publish's
	// error class, NeedsWorkflow, …); ToLane those given back.
	ToWorkflow map[string]int `json:"handoffs_to_workflow,omitempty"`
	ToLane     int            `json:"handoffs_to_lane,omitempty"`
	// FirstAttempt is how many of the run's published rows were published
	// at their first claim (attempts = 1).
	FirstAttempt int `json:"published_at_first_attempt"`
	// Workflows is how many workflow runs the run's task queue had, the
	// probe's included.
	Workflows int `json:"workflows"`
}

// handoffs is the number of aggregates handed to their workflows.
func (l *LaneCounts) handoffs() int {
	n := 0
	for _, v := range l.ToWorkflow {
		n += v
	}
	return n
}

// add sums o into l.
func (l *LaneCounts) add(o LaneCounts) {
	l.Events += o.Events
	l.Direct += o.Direct
	l.ViaWorkflow += o.ViaWorkflow
	l.FirstAttempt += o.FirstAttempt
	l.ToLane += o.ToLane
	l.Workflows += o.Workflows
	for k, v := range o.ToWorkflow {
		if l.ToWorkflow == nil {
			l.ToWorkflow = map[string]int{}
		}
		l.ToWorkflow[k] += v
	}
}

// causes lists the handoffs by cause: "Unroutable 1, NeedsWorkflow 20",
// or "none".
func (l *LaneCounts) causes() string {
	if len(l.ToWorkflow) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l.ToWorkflow)) {
		parts = append(parts, fmt.Sprintf("%s %s", k, count(l.ToWorkflow[k])))
	}
	return strings.Join(parts, ", ")
}

// laneEnv is what a SystemLane process needs beyond ferryEnv: its
// metrics listener, so that the bench can read its counts.
func laneEnv(metricsAddr string) []string {
	return []string{"FERRY_METRICS_ADDRESS=" + metricsAddr}
}

// readLaneCounts reads the lane's counters from the ferry process's
// /metrics and the rows' attempts of aggType.
func (r *runner) readLaneCounts(ctx context.Context, metricsAddr, aggType string) (*LaneCounts, error) {
	m, err := scrapeServer(ctx, metricsURL(metricsAddr))
	if err != nil {
		return nil, fmt.Errorf("ferry run's metrics: %w", err)
	}
	c := laneCountsOf(m)
	if err := r.pool.QueryRow(ctx, sqlFirstAttempts, aggType).Scan(&c.FirstAttempt); err != nil {
		return nil, fmt.Errorf("count rows published at their first attempt: %w", err)
	}
	return c, nil
}

// laneCountsOf reads the lane's counters from a scrape of ferry's
// metrics.
func laneCountsOf(m serverMetrics) *LaneCounts {
	c := &LaneCounts{ToWorkflow: map[string]int{}}
	paths := m.byLabel(metricLanePublished, "path", nil)
	c.Direct, c.ViaWorkflow = int(paths[metrics.PathDirect]), int(paths[metrics.PathWorkflow])
	f := m.family(metricLaneHandoffs)
	for _, s := range f.GetMetric() {
		l := labelsOf(s)
		n := int(s.GetCounter().GetValue() + s.GetUntyped().GetValue())
		if n == 0 {
			continue
		}
		switch l["direction"] {
		case metrics.ToWorkflow:
			c.ToWorkflow[l["cause"]] += n
		case metrics.ToLane:
			c.ToLane += n
		}
	}
	return c
}

// sqlFirstAttempts counts an aggregate type's rows published at their
// first claim.
const sqlFirstAttempts = `SELECT count(*) FROM outbox_events WHERE aggregate_type = $1 AND status = 'published' AND attempts = 1`

// queueWorkflows lists the workflow IDs of every run on the task queue
// (the run's own: its aggregates' workflows and the probe's), from
// visibility. Read once the server went idle, it is complete.
func queueWorkflows(ctx context.Context, tc client.Client, queue string) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, Query: fmt.Sprintf("TaskQueue = '%s'", queue), NextPageToken: token, PageSize: 1000,
		})
		if err != nil {
			return nil, fmt.Errorf("list the workflows of task queue %s: %w", queue, err)
		}
		for _, e := range resp.GetExecutions() {
			if id := e.GetExecution().GetWorkflowId(); !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return ids, nil
		}
	}
}

// aggregatesOf picks the aggregate ids of aggType from workflow IDs
// (workflows.WorkflowID: ferry/<type>/<id>).
func aggregatesOf(workflowIDs []string, aggType string) []string {
	prefix := workflows.WorkflowID(aggType, "")
	var out []string
	for _, id := range workflowIDs {
		if rest, ok := strings.CutPrefix(id, prefix); ok {
			out = append(out, rest)
		}
	}
	return out
}

// The handoff probe: during the publish-first lane's probeWorkload run,
// the bench commits one event that RabbitMQ cannot route (event type
// probeEventType, which the consumer's binding leaves out) on an
// aggregate of its own, and measures from its commit until the Temporal
// UI would list the aggregate with its retrying activity: until
// DescribeWorkflowExecution of ferry/<type>/<id> shows a pending
// ferry.PublishEvent (what the target judges), and until that activity's
// attempt is 2 or more (it failed and is retried). The probe's workflow is
// the run's: its cost is in the run's server counts.
const (
	probeWorkload  = WorkloadSteady500
	probeEventType = "unroutable"
	probeAggregate = "probe"
	// probeEvery is how often the probe asks the server and the rows.
	probeEvery = 25 * time.Millisecond
	// probeTimeout ends the probe's watch.
	probeTimeout = time.Minute
	// probeTarget: the UI lists the aggregate with its retrying activity
	// within this.
	probeTarget = 2 * time.Second
)

// probeType is the probe's aggregate type in run aggType.
func probeType(aggType string) string { return aggType + "_probe" }

// Probe is what the handoff probe measured in one run. Durations are from
// the probe event's commit; 0 when not seen within probeTimeout.
type Probe struct {
	// AtSeconds is the commit, from the run's first commit.
	AtSeconds float64 `json:"at_seconds"`
	// Handed: the aggregate's owner row says its workflow owns it (the
	// relay handed it over), with Cause.
	Handed time.Duration `json:"handed_ns"`
	Cause  string        `json:"cause,omitempty"`
	// Listed: DescribeWorkflowExecution shows a pending ferry.PublishEvent.
	Listed time.Duration `json:"listed_ns"`
	// Retrying: that activity's attempt is 2 or more.
	Retrying time.Duration `json:"retrying_ns"`
	Problem  string        `json:"problem,omitempty"`
}

// ProbeSummary is the probe's medians over the reps (medianSeen).
type ProbeSummary struct {
	Reps     int           `json:"reps"`
	Handed   time.Duration `json:"handed_ns"`
	Listed   time.Duration `json:"listed_ns"`
	Retrying time.Duration `json:"retrying_ns"`
	Problems []string      `json:"problems,omitempty"`
}

func summarizeProbe(runs []RunResult) *ProbeSummary {
	var handed, listed, retrying []time.Duration
	s := &ProbeSummary{}
	for _, r := range runs {
		p := r.Probe
		if p == nil {
			continue
		}
		s.Reps++
		if p.Problem != "" {
			s.Problems = append(s.Problems, fmt.Sprintf("rep %d: %s", r.Rep, p.Problem))
		}
		handed, listed, retrying = append(handed, p.Handed), append(listed, p.Listed), append(retrying, p.Retrying)
	}
	if s.Reps == 0 {
		return nil
	}
	s.Handed, s.Listed, s.Retrying = medianSeen(handed), medianSeen(listed), medianSeen(retrying)
	return s
}

// medianSeen is the median of ds with a 0 (not seen) counting as the
// longest, and 0 when that is the median; of an even count the upper of
// the two middle values (the conservative one, for a target with an upper
// bound).
func medianSeen(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	xs := slices.Clone(ds)
	slices.SortFunc(xs, func(a, b time.Duration) int {
		switch {
		case a == b:
			return 0
		case a == 0:
			return 1
		case b == 0:
			return -1
		}
		return cmp.Compare(a, b)
	})
	return xs[len(xs)/2]
}

// runProbe commits the probe's event after delay and watches it until it
// is listed with its retrying activity, probeTimeout passes or ctx ends.
// first is the run's first commit (for AtSeconds; zero: none yet).
func (r *runner) runProbe(ctx context.Context, aggType string, delay time.Duration, first func() time.Time) *Probe {
	p := &Probe{}
	if !sleepCtx(ctx, delay) {
		p.Problem = "the run ended before the probe's event was committed"
		return p
	}
	typ := probeType(aggType)
	ev := outbox.Event{AggregateType: typ, AggregateID: probeAggregate, EventType: probeEventType, Payload: payload(128)}
	if _, err := r.prod.commit(ctx, probeAggregate, []outbox.Event{ev}); err != nil {
		p.Problem = fmt.Sprintf("commit the probe's event: %v", err)
		return p
	}
	committed := time.Now()
	if f := first(); !f.IsZero() {
		p.AtSeconds = committed.Sub(f).Seconds()
	}
	wfID := workflows.WorkflowID(typ, probeAggregate)
	for p.Listed == 0 || p.Retrying == 0 {
		since := time.Since(committed)
		if since > probeTimeout {
			p.Problem = fmt.Sprintf("%s was not listed with a retrying %s within %s (handed over: %v)", wfID, workflows.PublishEventActivity, probeTimeout, p.Handed > 0)
			return p
		}
		if p.Handed == 0 {
			var owner, cause string
			err := r.pool.QueryRow(ctx, sqlProbeOwner, typ, probeAggregate).Scan(&owner, &cause)
			if err == nil && owner == relaydb.OwnerWorkflow {
				p.Handed, p.Cause = time.Since(committed), cause
			}
		}
		d, err := r.tc.DescribeWorkflowExecution(ctx, wfID, "")
		var notFound *serviceerror.NotFound
		switch {
		case err == nil:
			now := time.Since(committed)
			for _, a := range d.GetPendingActivities() {
				if a.GetActivityType().GetName() != workflows.PublishEventActivity {
					continue
				}
				if p.Listed == 0 {
					p.Listed = now
				}
				if a.GetAttempt() >= 2 && p.Retrying == 0 {
					p.Retrying = now
				}
			}
		case errors.As(err, &notFound), ctx.Err() != nil:
		default:
			// A busy server answers late or not at all: asked again.
		}
		if !sleepCtx(ctx, probeEvery) {
			if p.Listed == 0 {
				p.Problem = "the run ended before the probe's workflow was listed"
			}
			return p
		}
	}
	return p
}

const sqlProbeOwner = `SELECT owner, coalesce(cause, '') FROM outbox_owners WHERE aggregate_type = $1 AND aggregate_id = $2`
