package status

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/workflows"
)

// Snapshot is one look at Ferry.
type Snapshot struct {
	At        time.Time `json:"at"`
	Namespace string    `json:"namespace"`
	TaskQueue string    `json:"task_queue"`
	// Temporal is the cluster the snapshot was taken from; nil when not
	// asked (CollectTemporal).
	Temporal *Temporal `json:"temporal,omitempty"`
	// Backlog: rows not yet delivered (pending, dispatched, quarantined),
	// by status.
	Backlog []StatusCount `json:"backlog"`
	// Published in the last minute and the last hour.
	PublishedLastMinute int64 `json:"published_last_minute"`
	PublishedLastHour   int64 `json:"published_last_hour"`
	// Blocked: at most the first 100 (BlockedTruncated; `ferry blocked`
	// lists all).
	Blocked          []Blocked `json:"blocked"`
	BlockedTruncated bool      `json:"blocked_truncated,omitempty"`
	// Unheld are quarantined rows no blocked workflow holds (Temporal
	// refused their start or signal, migration 0007 quarantined them, or
	// their workflow was terminated): at most the first 100, oldest first
	// (UnheldTruncated; `ferry blocked` lists all).
	Unheld          []Unheld `json:"unheld"`
	UnheldTruncated bool     `json:"unheld_truncated,omitempty"`
	// EffectsWaiting are effect workflows (payments, e-mails) whose outcome
	// is unknown: reconciling on their own, or escalated to an operator.
	// Oldest first; at most the first 1000 running effect workflows are
	// looked at (EffectsTruncated).
	EffectsWaiting   []EffectWaiting `json:"effects_waiting"`
	EffectsTruncated bool            `json:"effects_truncated,omitempty"`
	// Retention and Reconcile are the maintenance schedules with the result
	// of their last completed run.
	Retention *Run[workflows.RetentionResult] `json:"retention,omitempty"`
	Reconcile *Run[workflows.ReconcileResult] `json:"reconcile,omitempty"`
	// WALSlot is the log-tailing relay's replication slot; nil when there
	// is none (CollectWALSlot).
	WALSlot *WALSlot `json:"wal_slot,omitempty"`
	// Lane is who delivers: the relays registered and the aggregates the
	// publish-first lane handed to workflows.
	Lane Lane `json:"lane"`
}

// Lane is the delivery lane's part of a Snapshot.
type Lane struct {
	// Lane is the lane of the relay seen last ("workflow",
	// "publish-first"); empty when no relay registered.
	Lane string `json:"lane"`
	// Relays registered (ferry_relays), the most recently seen first; a
	// relay not seen for 30s is gone.
	Relays []LaneRelay `json:"relays"`
	// WorkflowOwned counts the aggregates their workflows own now (handed
	// over, not yet released); Owned lists the longest-held, at most 20.
	WorkflowOwned int64        `json:"workflow_owned"`
	Owned         []OwnedByRun `json:"owned"`
	// RelayLeases counts aggregates a relay is publishing directly now.
	RelayLeases int64 `json:"relay_leases"`
}

// LaneRelay is one registered relay.
type LaneRelay struct {
	Name   string        `json:"name"`
	Lane   string        `json:"lane"`
	Source string        `json:"source"`
	Seen   time.Duration `json:"seen_ns"`
}

// OwnedByRun is one aggregate its workflow owns.
type OwnedByRun struct {
	WorkflowID string    `json:"workflow_id"`
	Cause      string    `json:"cause"`
	Epoch      int64     `json:"epoch"`
	Since      time.Time `json:"since"`
}

// StatusCount is the backlog of one status.
type StatusCount struct {
	Status string `json:"status"`
	Count  int64  `json:"count"`
	// OldestAge counts from when the row became deliverable; zero for
	// delayed rows, which wait for their deliver_after and are not late.
	OldestAge time.Duration `json:"oldest_age_ns"`
	// NextDue, for delayed rows, is how long until the first is due.
	NextDue time.Duration `json:"next_due_ns,omitempty"`
}

// Blocked is one aggregate held at a quarantined event.
type Blocked struct {
	WorkflowID string    `json:"workflow_id"`
	EventID    string    `json:"event_id"`
	EventType  string    `json:"event_type"`
	ErrorClass string    `json:"error_class"`
	Since      time.Time `json:"since"`
}

// Unheld is a quarantined outbox row that no running workflow is blocked
// at: `ferry repair` applies to it directly (skip, retry, patch).
type Unheld struct {
	EventID       string `json:"event_id"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	Version       int64  `json:"version"`
	EventType     string `json:"event_type"`
	// ErrorClass is the row's last_error_class (migration 0011).
	ErrorClass string `json:"error_class"`
	// LastError is not in the JSON: it may quote the payload (`ferry
	// blocked` prints it through the redactor).
	LastError string `json:"-"`
	// CreatedAt is when the event was committed (a row does not record
	// when it was quarantined).
	CreatedAt time.Time `json:"created_at"`
	// payload, for redacting LastError; not printed.
	Payload *string `json:"-"`
}

// Aggregate is "TYPE/ID", the id quoted when it holds something a
// terminal would not show as it is (a control character, invalid UTF-8,
// a format character such as U+202E: whatever strconv.IsPrint refuses),
// so a terminal shows them instead of acting on them. Printable characters
// outside ASCII ("müller", schema 0012) are shown as they are.
func (u Unheld) Aggregate() string {
	for _, r := range u.AggregateID {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return u.AggregateType + "/" + strconv.Quote(u.AggregateID)
		}
	}
	return u.AggregateType + "/" + u.AggregateID
}

// EffectWaiting is one effect workflow whose outcome is unknown.
type EffectWaiting struct {
	WorkflowID   string `json:"workflow_id"`
	WorkflowType string `json:"workflow_type"`
	// Phase is effects.PhaseReconciling (it looks the outcome up on its
	// own) or effects.PhaseEscalated (it waits for an operator).
	Phase string `json:"phase"`
	// Key is the effect's idempotency key.
	Key string `json:"key,omitempty"`
	// ErrorClass of an escalated effect (PaymentUnknown, EmailAmbiguous).
	ErrorClass string `json:"error_class,omitempty"`
	// Since: escalated since, or the outcome unknown since; zero when the
	// workflow's memo could not be read (encrypted with another key).
	Since time.Time `json:"since,omitzero"`
}

// Run is a maintenance schedule: its last and next run, and the result of
// the last completed run (nil when none completed, or it could not be read).
type Run[T any] struct {
	Last   time.Time `json:"last,omitempty"`
	Next   time.Time `json:"next,omitempty"`
	Result *T        `json:"result,omitempty"`
}

// effectTypes are the workflow types of the built-in effects, which keep
// their phase in the memo effects.MemoKey.
var effectTypes = []string{effects.PaymentWorkflowName, effects.EmailWorkflowName}

// maxBlocked bounds the blocked aggregates Collect lists; maxEffectPages
// the running effect workflows it looks at; maxEffectLines the ones Render
// shows.
const (
	maxBlocked     = 100
	maxEffectPages = 10
	maxEffectLines = 20
)

// Collect reads a Snapshot from PostgreSQL and Temporal. dc decodes memos
// (the client's data converter, with Ferry's payload codec when one is
// configured); nil means the default converter.
func Collect(ctx context.Context, pool *pgxpool.Pool, c client.Client, dc converter.DataConverter, namespace, taskQueue string) (Snapshot, error) {
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	s := Snapshot{At: time.Now().UTC(), Namespace: namespace, TaskQueue: taskQueue, Blocked: []Blocked{}, Unheld: []Unheld{}}
	backlog, err := relaydb.ReadBacklog(ctx, pool)
	if err != nil {
		return s, err
	}
	s.Backlog = backlogByStatus(backlog)
	if s.PublishedLastMinute, s.PublishedLastHour, err = relaydb.PublishedRecently(ctx, pool); err != nil {
		return s, err
	}
	if s.Blocked, s.BlockedTruncated, err = BlockedAggregates(ctx, c, namespace, maxBlocked); err != nil {
		return s, err
	}
	held := make(map[string]bool, len(s.Blocked))
	for _, b := range s.Blocked {
		held[strings.ToLower(b.EventID)] = true
	}
	if s.Unheld, s.UnheldTruncated, err = UnheldRows(ctx, pool, held, maxBlocked); err != nil {
		return s, err
	}
	if s.EffectsWaiting, s.EffectsTruncated, err = effectsWaiting(ctx, c, dc, namespace); err != nil {
		return s, err
	}
	if s.Lane, err = collectLane(ctx, pool); err != nil {
		return s, err
	}
	s.Retention = lastRun[workflows.RetentionResult](ctx, c, workflows.RetentionScheduleID+"/"+taskQueue)
	s.Reconcile = lastRun[workflows.ReconcileResult](ctx, c, workflows.ReconcileScheduleID+"/"+taskQueue)
	return s, nil
}

// maxOwned bounds the workflow-owned aggregates Collect lists.
const maxOwned = 20

// collectLane reads the relays' registry and the owner table.
func collectLane(ctx context.Context, pool *pgxpool.Pool) (Lane, error) {
	l := Lane{Relays: []LaneRelay{}, Owned: []OwnedByRun{}}
	relays, err := relaydb.Relays(ctx, pool)
	if err != nil {
		return l, err
	}
	for i, r := range relays {
		if i == 0 {
			l.Lane = r.Lane
		}
		l.Relays = append(l.Relays, LaneRelay{Name: r.Name, Lane: r.Lane, Source: r.Source, Seen: r.Seen})
	}
	n, err := relaydb.ReadLaneCounts(ctx, pool)
	if err != nil {
		return l, err
	}
	l.WorkflowOwned, l.RelayLeases = n.Workflow, n.Relay
	owned, err := relaydb.WorkflowOwnedSince(ctx, pool, 0, maxOwned)
	if err != nil {
		return l, fmt.Errorf("read aggregates workflows own: %w", err)
	}
	for _, o := range owned {
		l.Owned = append(l.Owned, OwnedByRun{WorkflowID: workflows.WorkflowID(o.Type, o.ID), Cause: o.Cause, Epoch: o.Epoch, Since: o.Since})
	}
	return l, nil
}

// BlockedAggregates lists the running aggregate workflows held at a
// quarantined event (FerryBlocked), at most limit of them (0: all); more
// says there were more. Escalated effects set FerryBlocked too: they are
// not aggregates, and `ferry repair` does not apply to them.
func BlockedAggregates(ctx context.Context, c client.Client, namespace string, limit int) (out []Blocked, more bool, err error) {
	out = []Blocked{}
	query := fmt.Sprintf("%s = true AND ExecutionStatus = 'Running' AND WorkflowType = '%s'", workflows.SABlocked, workflows.AggregateWorkflowName)
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, Query: query, PageSize: 100, NextPageToken: token,
		})
		if err != nil {
			return out, false, fmt.Errorf("list blocked workflows: %w", err)
		}
		for _, ex := range resp.Executions {
			if limit > 0 && len(out) == limit {
				return out, true, nil
			}
			b := Blocked{WorkflowID: ex.Execution.WorkflowId}
			fields := ex.GetSearchAttributes().GetIndexedFields()
			for name, dst := range map[string]any{workflows.SABlockedEventID: &b.EventID, workflows.SABlockedEventType: &b.EventType,
				workflows.SAErrorClass: &b.ErrorClass, workflows.SABlockedSince: &b.Since} {
				if p, ok := fields[name]; ok {
					_ = json.Unmarshal(p.GetData(), dst)
				}
			}
			out = append(out, b)
		}
		token = resp.NextPageToken
		if len(token) == 0 {
			return out, false, nil
		}
	}
}

// UnheldRows lists quarantined rows whose event id is not in held (the
// lower-case event ids BlockedAggregates found), oldest first, at most
// limit of them (0: all); more says there were more. A row a workflow has
// just quarantined may show here until Temporal's list shows its block.
func UnheldRows(ctx context.Context, pool *pgxpool.Pool, held map[string]bool, limit int) (out []Unheld, more bool, err error) {
	out = []Unheld{}
	n := 0
	if limit > 0 {
		n = limit + len(held) + 1
	}
	all, err := relaydb.Quarantined(ctx, pool, n)
	if err != nil {
		return out, false, err
	}
	for _, r := range all {
		if held[strings.ToLower(r.ID)] {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, true, nil
		}
		out = append(out, Unheld{EventID: r.ID, AggregateType: r.AggregateType, AggregateID: r.AggregateID, Version: r.Version,
			EventType: r.EventType, ErrorClass: errorClass(r.LastErrorClass, r.LastError), LastError: r.LastError, CreatedAt: r.CreatedAt, Payload: r.Payload})
	}
	return out, false, nil
}

// backlogByStatus sums the backlog of every aggregate type by status, in
// status order, keeping the oldest age and the nearest due time.
func backlogByStatus(rows []relaydb.Backlog) []StatusCount {
	out := []StatusCount{}
	for _, r := range rows {
		i := slices.IndexFunc(out, func(sc StatusCount) bool { return sc.Status == r.Status })
		if i < 0 {
			out = append(out, StatusCount{Status: r.Status})
			i = len(out) - 1
		}
		if r.Status == "delayed" && (out[i].Count == 0 || r.NextDue < out[i].NextDue) {
			out[i].NextDue = r.NextDue
		}
		out[i].Count += r.Count
		out[i].OldestAge = max(out[i].OldestAge, r.OldestAge)
	}
	slices.SortFunc(out, func(a, b StatusCount) int { return strings.Compare(a.Status, b.Status) })
	return out
}

// errorClass is a quarantined row's class: its last_error_class, else
// (a row quarantined by SQL that does not know the column) CLASS read from
// "quarantined (CLASS): …", the form every quarantine writes.
func errorClass(class, lastError string) string {
	if class != "" {
		return class
	}
	rest, ok := strings.CutPrefix(lastError, "quarantined (")
	if !ok {
		return workflows.ErrClassUnknown
	}
	parsed, _, ok := strings.Cut(rest, ")")
	if !ok || parsed == "" {
		return workflows.ErrClassUnknown
	}
	return parsed
}

// effectsWaiting lists running effect workflows that are reconciling
// (memo) or escalated (FerryBlocked, in clear even with a codec).
func effectsWaiting(ctx context.Context, c client.Client, dc converter.DataConverter, namespace string) ([]EffectWaiting, bool, error) {
	query := fmt.Sprintf("WorkflowType IN ('%s') AND ExecutionStatus = 'Running'", strings.Join(effectTypes, "', '"))
	out := []EffectWaiting{}
	var token []byte
	for range maxEffectPages {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, Query: query, PageSize: 100, NextPageToken: token,
		})
		if err != nil {
			return out, false, fmt.Errorf("list effect workflows: %w", err)
		}
		for _, ex := range resp.Executions {
			w := EffectWaiting{WorkflowID: ex.GetExecution().GetWorkflowId(), WorkflowType: ex.GetType().GetName()}
			var memo struct {
				Phase        string    `json:"phase"`
				Key          string    `json:"key"`
				UnknownSince time.Time `json:"unknown_since"`
			}
			if p, ok := ex.GetMemo().GetFields()[effects.MemoKey]; ok {
				_ = dc.FromPayload(p, &memo) // unreadable: judged by the search attributes alone
			}
			w.Phase, w.Key, w.Since = memo.Phase, memo.Key, memo.UnknownSince
			fields := ex.GetSearchAttributes().GetIndexedFields()
			var blocked bool
			if p, ok := fields[workflows.SABlocked]; ok {
				_ = json.Unmarshal(p.GetData(), &blocked)
			}
			if blocked {
				w.Phase, w.Since = effects.PhaseEscalated, time.Time{}
				for name, dst := range map[string]any{workflows.SAErrorClass: &w.ErrorClass, workflows.SABlockedSince: &w.Since} {
					if p, ok := fields[name]; ok {
						_ = json.Unmarshal(p.GetData(), dst)
					}
				}
			}
			if w.Phase == effects.PhaseReconciling || w.Phase == effects.PhaseEscalated {
				out = append(out, w)
			}
		}
		token = resp.NextPageToken
		if len(token) == 0 {
			break
		}
	}
	// Escalated first (they need a person), then the oldest.
	slices.SortStableFunc(out, func(a, b EffectWaiting) int {
		if ea, eb := a.Phase == effects.PhaseEscalated, b.Phase == effects.PhaseEscalated; ea != eb {
			if ea {
				return -1
			}
			return 1
		}
		return a.Since.Compare(b.Since)
	})
	return out, len(token) > 0, nil
}

// lastRun describes a schedule and reads the result of its latest
// completed run (a run still going is skipped).
func lastRun[T any](ctx context.Context, c client.Client, id string) *Run[T] {
	d, err := c.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
	if err != nil {
		return nil
	}
	r := &Run[T]{}
	actions := d.Info.RecentActions
	if n := len(actions); n > 0 {
		r.Last = actions[n-1].ActualTime
	}
	if len(d.Info.NextActionTimes) > 0 {
		r.Next = d.Info.NextActionTimes[0]
	}
	for i := len(actions) - 1; i >= 0 && i >= len(actions)-3; i-- {
		started := actions[i].StartWorkflowResult
		if started == nil {
			continue
		}
		desc, err := c.DescribeWorkflowExecution(ctx, started.WorkflowID, started.FirstExecutionRunID)
		if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			continue
		}
		var res T
		if err := c.GetWorkflow(ctx, started.WorkflowID, started.FirstExecutionRunID).Get(ctx, &res); err == nil {
			r.Result = &res
		}
		break
	}
	return r
}
