package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/workflows"
)

// repairFakes stand in for package activities in the quarantine, repair
// and replay tests: publishing fails for chosen events, and every call is
// recorded in order.
type repairFakes struct {
	now func() time.Time // the test environment's clock

	mu          sync.Mutex
	failing     map[string]*failure // by event id
	attempts    []attempt           // every publish attempt
	published   []string            // event ids published, in order
	quarantined []workflows.QuarantineInput
	repairs     []workflows.RepairInput
	replays     []workflows.ReplayEventInput
	replayFails map[string]bool // event ids whose replay fails for good
	holds       []workflows.HoldInput
	releases    []workflows.ReleaseHeldInput

	// settings are what the worker answers a run that asks (Revision2).
	settings workflows.Settings
}

// failure makes publish attempts of one event fail.
type failure struct {
	errType      string
	nonRetryable bool
	left         int // failing attempts still to come; negative: until healed
}

type attempt struct {
	eventID string
	at      time.Time
}

// fail makes the next times publish attempts of eventID fail with a
// retryable error of errType (times < 0: until healed).
func (f *repairFakes) fail(eventID, errType string, times int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing[eventID] = &failure{errType: errType, left: times}
}

// failForGood makes every attempt of eventID fail with a non-retryable error.
func (f *repairFakes) failForGood(eventID, errType string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing[eventID] = &failure{errType: errType, nonRetryable: true, left: -1}
}

// heal lets eventID's next attempts succeed (an operator fixed the cause).
func (f *repairFakes) heal(eventID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.failing, eventID)
}

func (f *repairFakes) Publish(_ context.Context, in workflows.PublishInput) (workflows.PublishResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, attempt{eventID: in.EventID, at: f.now()})
	if fl, ok := f.failing[in.EventID]; ok && fl.left != 0 {
		fl.left--
		msg := fmt.Sprintf("no route for event %s (fake)", in.EventID)
		if fl.nonRetryable {
			return workflows.PublishResult{}, temporal.NewNonRetryableApplicationError(msg, fl.errType, nil)
		}
		return workflows.PublishResult{}, temporal.NewApplicationError(msg, fl.errType)
	}
	f.published = append(f.published, in.EventID)
	return workflows.PublishResult{}, nil
}

// PublishBatch publishes the leading events that would not fail; an
// injected failure stops the batch without being used up, so the regular
// path's attempts are exactly the ones the policy counts.
func (f *repairFakes) PublishBatch(_ context.Context, in workflows.PublishBatchInput) (workflows.PublishBatchResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var res workflows.PublishBatchResult
	if in.Settings {
		s := f.settings.WithDefaults()
		res.Settings = &s
		in.Events = in.Events[:min(len(in.Events), max(s.PublishBatchSize, 0))]
		if len(in.Events) == 0 {
			return res, nil
		}
	}
	for _, ev := range in.Events {
		if fl, ok := f.failing[ev.ID]; ok && fl.left != 0 {
			res.Stopped = fmt.Sprintf("event %s fails (fake)", ev.ID)
			break
		}
		f.attempts = append(f.attempts, attempt{eventID: ev.ID, at: f.now()})
		f.published = append(f.published, ev.ID)
		res.Published++
	}
	if res.Published == 0 {
		return res, errors.New(res.Stopped)
	}
	return res, nil
}

func (f *repairFakes) LoadCursor(_ context.Context, in workflows.CursorInput) (workflows.CursorResult, error) {
	var res workflows.CursorResult
	if in.Settings {
		f.mu.Lock()
		s := f.settings.WithDefaults()
		f.mu.Unlock()
		res.Settings = &s
	}
	return res, nil
}

func (f *repairFakes) Quarantine(_ context.Context, in workflows.QuarantineInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quarantined = append(f.quarantined, in)
	return nil
}

// Repair answers like activities.ApplyRepair: the request's identity and
// the audit row's id (1, 2, … in call order).
func (f *repairFakes) Repair(_ context.Context, in workflows.RepairInput) (workflows.RepairResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repairs = append(f.repairs, in)
	return workflows.RepairResult{
		RequestID: in.Request.RequestID,
		Action:    in.Request.Action,
		EventID:   in.Request.EventID,
		Version:   in.Version,
		AuditID:   int64(len(f.repairs)),
	}, nil
}

func (f *repairFakes) Replay(_ context.Context, in workflows.ReplayEventInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replays = append(f.replays, in)
	if f.replayFails[in.EventID] {
		return temporal.NewNonRetryableApplicationError("not replayable (fake)", "NotReplayable", nil)
	}
	return nil
}

func (f *repairFakes) Hold(_ context.Context, in workflows.HoldInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holds = append(f.holds, in)
	return nil
}

func (f *repairFakes) Release(_ context.Context, in workflows.ReleaseHeldInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases = append(f.releases, in)
	return nil
}

// calls is a copy of what the fakes recorded.
type calls struct {
	attempts    []string
	published   []string
	quarantined []workflows.QuarantineInput
	repairs     []workflows.RepairInput
}

func (f *repairFakes) calls() calls {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := calls{
		published:   slices.Clone(f.published),
		quarantined: slices.Clone(f.quarantined),
		repairs:     slices.Clone(f.repairs),
	}
	for _, a := range f.attempts {
		c.attempts = append(c.attempts, a.eventID)
	}
	return c
}

// attemptTimes are the workflow times of eventID's publish attempts.
func (f *repairFakes) attemptTimes(eventID string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Time
	for _, a := range f.attempts {
		if a.eventID == eventID {
			out = append(out, a.at)
		}
	}
	return out
}

// saRecorder is a worker interceptor that records the workflow's search
// attributes as they are after each upsert, the way the workflow itself
// (and so the server) sees them: an unset attribute is gone.
type saRecorder struct {
	interceptor.WorkerInterceptorBase
	upserts []saUpsert // written on the workflow's goroutine; read after the run or from a delayed callback
	memos   []map[string]any
}

type saUpsert struct {
	at    time.Time
	attrs map[string]any
}

func (r *saRecorder) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &saInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, rec: r}
}

type saInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	rec *saRecorder
}

func (i *saInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&saOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, rec: i.rec})
}

type saOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	rec *saRecorder
}

func (o *saOutbound) UpsertTypedSearchAttributes(ctx workflow.Context, updates ...temporal.SearchAttributeUpdate) error {
	if err := o.Next.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		return err
	}
	// Ferry's attributes one by one: ranging over them all would be map
	// iteration in workflow code, which workflowcheck rightly refuses.
	sa := o.Next.GetTypedSearchAttributes(ctx)
	attrs := map[string]any{}
	if v, ok := sa.GetBool(saKeyBlocked); ok {
		attrs[workflows.SABlocked] = v
	}
	for _, k := range []temporal.SearchAttributeKeyKeyword{saKeyEventID, saKeyEventType, saKeyErrorClass} {
		if v, ok := sa.GetKeyword(k); ok {
			attrs[k.GetName()] = v
		}
	}
	if v, ok := sa.GetTime(saKeySince); ok {
		attrs[workflows.SABlockedSince] = v.UTC()
	}
	o.rec.upserts = append(o.rec.upserts, saUpsert{at: o.Next.Now(ctx).UTC(), attrs: attrs})
	return nil
}

func (o *saOutbound) UpsertMemo(ctx workflow.Context, memo map[string]any) error {
	if err := o.Next.UpsertMemo(ctx, memo); err != nil {
		return err
	}
	o.rec.memos = append(o.rec.memos, memo)
	return nil
}

var (
	saKeyBlocked    = temporal.NewSearchAttributeKeyBool(workflows.SABlocked)
	saKeyEventID    = temporal.NewSearchAttributeKeyKeyword(workflows.SABlockedEventID)
	saKeyEventType  = temporal.NewSearchAttributeKeyKeyword(workflows.SABlockedEventType)
	saKeyErrorClass = temporal.NewSearchAttributeKeyKeyword(workflows.SAErrorClass)
	saKeySince      = temporal.NewSearchAttributeKeyTime(workflows.SABlockedSince)
)

type qbundle struct {
	env   *testsuite.TestWorkflowEnvironment
	fakes *repairFakes
	sa    *saRecorder
}

// qsetup returns a test environment with the aggregate and replay
// workflows and the fake activities registered under their wire names.
func qsetup(t *testing.T) *qbundle {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(quietLogger())
	env := s.NewTestWorkflowEnvironment()
	rec := &saRecorder{}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{rec}})
	f := &repairFakes{now: env.Now, failing: map[string]*failure{}, replayFails: map[string]bool{}}
	env.RegisterWorkflowWithOptions(workflows.Aggregate, workflow.RegisterOptions{Name: workflows.AggregateWorkflowName})
	env.RegisterWorkflowWithOptions(workflows.Replay, workflow.RegisterOptions{Name: workflows.ReplayWorkflowName})
	env.RegisterActivityWithOptions(f.Publish, activity.RegisterOptions{Name: workflows.PublishEventActivity})
	env.RegisterActivityWithOptions(f.LoadCursor, activity.RegisterOptions{Name: workflows.LoadCursorActivity})
	env.RegisterActivityWithOptions(f.PublishBatch, activity.RegisterOptions{Name: workflows.PublishBatchActivity})
	env.RegisterActivityWithOptions(f.Quarantine, activity.RegisterOptions{Name: workflows.QuarantineActivity})
	env.RegisterActivityWithOptions(f.Repair, activity.RegisterOptions{Name: workflows.RepairActivity})
	env.RegisterActivityWithOptions(f.Replay, activity.RegisterOptions{Name: workflows.ReplayActivity})
	env.RegisterActivityWithOptions(f.Hold, activity.RegisterOptions{Name: workflows.HoldEventsActivity})
	env.RegisterActivityWithOptions(f.Release, activity.RegisterOptions{Name: workflows.ReleaseHeldActivity})
	return &qbundle{env: env, fakes: f, sa: rec}
}

func qinput(policies map[string]workflows.EventPolicy) workflows.AggregateInput {
	return workflows.AggregateInput{AggregateType: "order", AggregateID: "o-1", IdleTimeout: time.Minute, Policies: policies}
}

// maxAttempts is a "*" policy that blocks after n attempts.
func maxAttempts(n int32) map[string]workflows.EventPolicy {
	return map[string]workflows.EventPolicy{"*": {MaxAttempts: n}}
}

func (b *qbundle) run(in workflows.AggregateInput) time.Duration {
	start := b.env.Now()
	b.env.ExecuteWorkflow(workflows.AggregateWorkflowName, in)
	return b.env.Now().Sub(start)
}

func (b *qbundle) signalAt(d time.Duration, versions ...int64) {
	b.env.RegisterDelayedCallback(func() {
		b.env.SignalWorkflow(workflows.EventsSignal, workflows.EventsSignalArg{Events: evs(versions...)})
	}, d)
}

func (b *qbundle) repairSignalAt(d time.Duration, req workflows.RepairRequest) {
	b.env.RegisterDelayedCallback(func() { b.env.SignalWorkflow(workflows.RepairSignal, req) }, d)
}

func (b *qbundle) healAt(d time.Duration, eventID string) {
	b.env.RegisterDelayedCallback(func() { b.fakes.heal(eventID) }, d)
}

func (b *qbundle) cancelAt(d time.Duration) {
	b.env.RegisterDelayedCallback(b.env.CancelWorkflow, d)
}

// update records what happened to one RepairUpdate.
type update struct {
	accepted  bool
	rejected  error
	completed bool
	result    workflows.RepairResult
	err       error
}

func (u *update) Accept()          { u.accepted = true }
func (u *update) Reject(err error) { u.rejected = err }
func (u *update) Complete(success any, err error) {
	u.completed = true
	u.err = err
	if res, ok := success.(workflows.RepairResult); ok {
		u.result = res
	}
}

// repairAt sends req as a RepairUpdate with its own update id after d.
func (b *qbundle) repairAt(d time.Duration, updateID string, req workflows.RepairRequest) *update {
	u := &update{}
	b.env.RegisterDelayedCallback(func() { b.env.UpdateWorkflow(workflows.RepairUpdate, updateID, u, req) }, d)
	return u
}

func requireApplied(t *testing.T, u *update, want workflows.RepairResult) {
	t.Helper()
	require.NoError(t, u.rejected)
	require.True(t, u.accepted, "update not accepted")
	require.True(t, u.completed, "update not completed")
	require.NoError(t, u.err)
	require.Equal(t, want, u.result)
}

// snapshot is what a delayed callback saw.
type snapshot struct {
	completed bool
	state     workflows.State
	err       error
	calls     calls
	upserts   int
}

func (b *qbundle) observeAt(d time.Duration) *snapshot {
	s := &snapshot{}
	b.env.RegisterDelayedCallback(func() {
		s.completed = b.env.IsWorkflowCompleted()
		s.calls = b.fakes.calls()
		s.upserts = len(b.sa.upserts)
		v, err := b.env.QueryWorkflow(workflows.StateQuery)
		if err != nil {
			s.err = err
			return
		}
		s.err = v.Get(&s.state)
	}, d)
	return s
}

func repairReq(requestID, action, eventID string) workflows.RepairRequest {
	return workflows.RepairRequest{RequestID: requestID, Action: action, EventID: eventID, Reason: "routing fixed", Actor: "alice"}
}

func ids(versions ...int64) []string {
	out := make([]string, len(versions))
	for i, v := range versions {
		out[i] = fmt.Sprintf("evt-%d", v)
	}
	return out
}

func repeat(id string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = id
	}
	return out
}

func blockedAttrs(b *workflows.Blocked) map[string]any {
	return map[string]any{
		workflows.SABlocked:          true,
		workflows.SABlockedEventID:   b.EventID,
		workflows.SABlockedEventType: b.EventType,
		workflows.SAErrorClass:       b.ErrorClass,
		workflows.SABlockedSince:     b.Since.UTC(),
	}
}

var unblockedAttrs = map[string]any{workflows.SABlocked: false}

func requireBlockedAt(t *testing.T, s *snapshot, eventID string, version int64, errClass string) {
	t.Helper()
	require.NoError(t, s.err)
	require.False(t, s.completed, "completed while blocked")
	require.NotNil(t, s.state.Blocked, "not blocked")
	require.Equal(t, eventID, s.state.Blocked.EventID)
	require.Equal(t, version, s.state.Blocked.Version)
	require.Equal(t, "order.changed", s.state.Blocked.EventType)
	require.Equal(t, errClass, s.state.Blocked.ErrorClass)
	require.Contains(t, s.state.Blocked.Error, "no route for event "+eventID)
	require.Equal(t, version-1, s.state.Delivered)
	require.Equal(t, version, s.state.Pending[0], "the blocked event must stay first in line")
}

func TestQuarantinesWhenAttemptsRunOut(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		policies     map[string]workflows.EventPolicy
		nonRetryable bool
		wantAttempts int
	}{
		{name: "policy's MaxAttempts", policies: maxAttempts(3), wantAttempts: 3},
		{name: "default MaxAttempts", wantAttempts: workflows.DefaultMaxAttempts},
		{
			name:         "no entry for the type and no fallback",
			policies:     map[string]workflows.EventPolicy{"customer.changed": {MaxAttempts: 2}},
			wantAttempts: workflows.DefaultMaxAttempts,
		},
		{name: "non-retryable error", policies: maxAttempts(3), nonRetryable: true, wantAttempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := qsetup(t)
			if tt.nonRetryable {
				b.fakes.failForGood("evt-2", "Unroutable")
			} else {
				b.fakes.fail("evt-2", "Unroutable", -1)
			}
			b.signalAt(time.Second, 1, 2, 3)
			b.signalAt(30*time.Minute, 4)
			// Far beyond the idle timeout and every retry: still blocked.
			blocked := b.observeAt(time.Hour)
			b.cancelAt(2 * time.Hour)
			b.run(qinput(tt.policies))

			requireBlockedAt(t, blocked, "evt-2", 2, "Unroutable")
			want := append(ids(1), repeat("evt-2", tt.wantAttempts)...)
			require.Equal(t, want, blocked.calls.attempts, "later versions were tried while blocked, or retries were not bounded")
			require.Equal(t, ids(1), blocked.calls.published)
			require.Len(t, blocked.calls.quarantined, 1)
			q := blocked.calls.quarantined[0]
			require.Equal(t, "evt-2", q.EventID)
			require.Equal(t, "order.changed", q.EventType)
			require.Equal(t, "Unroutable", q.ErrorClass)
			require.Contains(t, q.Error, "no route for event evt-2")
			require.Empty(t, blocked.calls.repairs)

			require.Len(t, b.sa.upserts, 1)
			require.Equal(t, blockedAttrs(blocked.state.Blocked), b.sa.upserts[0].attrs)
			require.Equal(t, blocked.state.Blocked.Since.UTC(), b.sa.upserts[0].at)

			// Cancelling a blocked aggregate cancels it: no new run, no
			// further attempt.
			require.True(t, b.env.IsWorkflowCompleted())
			err := b.env.GetWorkflowError()
			require.False(t, workflow.IsContinueAsNewError(err), "cancelled while blocked, but continued as new")
			require.True(t, temporal.IsCanceledError(err), "want cancelled, got %v", err)
			require.Equal(t, want, b.fakes.calls().attempts)
		})
	}
}

func TestRepairUpdateValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*workflows.RepairRequest)
		want   []string
	}{
		{
			name:   "empty request id",
			change: func(r *workflows.RepairRequest) { r.RequestID = "" },
			want:   []string{"request_id is empty"},
		},
		{
			name:   "empty actor",
			change: func(r *workflows.RepairRequest) { r.Actor = "" },
			want:   []string{"actor is empty"},
		},
		{
			name:   "empty reason",
			change: func(r *workflows.RepairRequest) { r.Reason = "" },
			want:   []string{"reason is empty"},
		},
		{
			name:   "unknown action",
			change: func(r *workflows.RepairRequest) { r.Action = "delete" },
			want:   []string{`action "delete"`, "retry, skip or patch"},
		},
		{
			name:   "not the blocked event",
			change: func(r *workflows.RepairRequest) { r.EventID = "evt-3" },
			want:   []string{"event evt-3 is not the blocked event", "blocked at event evt-2 (v2)"},
		},
		{
			name:   "patch without payload or schema version",
			change: func(r *workflows.RepairRequest) { r.Action = workflows.ActionPatch },
			want:   []string{"patch needs a payload, a schema_version or both"},
		},
		{
			name: "patch with a NUL escape",
			change: func(r *workflows.RepairRequest) {
				r.Action = workflows.ActionPatch
				r.Payload = []byte(`{"note":"a\u0000b"}`)
			},
			want: []string{`\u0000`},
		},
		{
			name: "patch with a negative schema version",
			change: func(r *workflows.RepairRequest) {
				r.Action = workflows.ActionPatch
				r.Payload = []byte(`{}`)
				r.SchemaVersion = -1
			},
			want: []string{"schema_version -1"},
		},
		{
			name:   "payload with retry",
			change: func(r *workflows.RepairRequest) { r.Payload = []byte(`{}`) },
			want:   []string{"payload and schema_version go with patch, not retry"},
		},
	}

	b := qsetup(t)
	b.fakes.fail("evt-2", "Unroutable", -1)
	b.signalAt(time.Second, 1)
	notBlocked := b.repairAt(10*time.Second, "u-not-blocked", repairReq("r-0", workflows.ActionRetry, "evt-1"))
	b.signalAt(20*time.Second, 2, 3)
	updates := make([]*update, len(tests))
	for i, tt := range tests {
		req := repairReq(fmt.Sprintf("r-%d", i+1), workflows.ActionRetry, "evt-2")
		tt.change(&req)
		updates[i] = b.repairAt(time.Hour+time.Duration(i)*time.Second, fmt.Sprintf("u-%d", i+1), req)
	}
	after := b.observeAt(2 * time.Hour)
	b.cancelAt(3 * time.Hour)
	b.run(qinput(maxAttempts(2)))

	require.False(t, notBlocked.accepted)
	require.ErrorContains(t, notBlocked.rejected, "aggregate order/o-1 is not blocked")
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := updates[i]
			require.False(t, u.accepted, "accepted")
			require.False(t, u.completed, "ran the handler")
			require.Error(t, u.rejected)
			for _, w := range tt.want {
				require.ErrorContains(t, u.rejected, w)
			}
		})
	}
	requireBlockedAt(t, after, "evt-2", 2, "Unroutable")
	require.Empty(t, after.calls.repairs)
	require.Equal(t, append(ids(1), repeat("evt-2", 2)...), after.calls.attempts)
}

func TestRepairByUpdate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		action        string
		payload       string
		schemaVersion int
		published     []string
		evt2Attempts  int
	}{
		{action: workflows.ActionRetry, published: ids(1, 2, 3), evt2Attempts: 3},
		// The event would publish fine now: skip must not even try.
		{action: workflows.ActionSkip, published: ids(1, 3), evt2Attempts: 2},
		{action: workflows.ActionPatch, payload: `{"amount":5}`, schemaVersion: 2, published: ids(1, 2, 3), evt2Attempts: 3},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			t.Parallel()
			b := qsetup(t)
			b.fakes.fail("evt-2", "Unroutable", -1)
			b.signalAt(time.Second, 1, 2, 3)
			blocked := b.observeAt(time.Hour - time.Second)
			b.healAt(time.Hour, "evt-2")
			req := repairReq("r-1", tt.action, "evt-2")
			if tt.payload != "" {
				req.Payload = []byte(tt.payload)
			}
			req.SchemaVersion = tt.schemaVersion
			u := b.repairAt(time.Hour, "u-1", req)
			after := b.observeAt(time.Hour + time.Second)
			took := b.run(qinput(maxAttempts(2)))

			requireBlockedAt(t, blocked, "evt-2", 2, "Unroutable")
			require.Equal(t, ids(1), blocked.calls.published)

			requireApplied(t, u, workflows.RepairResult{RequestID: "r-1", Action: tt.action, EventID: "evt-2", Version: 2, AuditID: 1})
			c := b.fakes.calls()
			require.Len(t, c.repairs, 1)
			got := c.repairs[0]
			require.Equal(t, workflows.RepairInput{Request: req, AggregateType: "order", AggregateID: "o-1", Version: 2}, got)
			if tt.payload != "" {
				require.JSONEq(t, tt.payload, string(got.Request.Payload))
			}

			require.NoError(t, after.err)
			require.Nil(t, after.state.Blocked)
			require.Equal(t, int64(3), after.state.Delivered)
			require.Empty(t, after.state.Pending)

			b.requireIdleCompletion(t, took, time.Hour)
			require.Equal(t, tt.published, c.published)
			require.Len(t, c.quarantined, 1)
			// In order: nothing after evt-2 before evt-2 was decided.
			require.Equal(t, append(append(ids(1), repeat("evt-2", tt.evt2Attempts)...), "evt-3"), c.attempts)
			require.Len(t, b.sa.upserts, 2)
			require.Equal(t, blockedAttrs(blocked.state.Blocked), b.sa.upserts[0].attrs)
			require.Equal(t, unblockedAttrs, b.sa.upserts[1].attrs)
		})
	}
}

func (b *qbundle) requireIdleCompletion(t *testing.T, took, notBefore time.Duration) {
	t.Helper()
	require.True(t, b.env.IsWorkflowCompleted())
	require.NoError(t, b.env.GetWorkflowError())
	require.GreaterOrEqual(t, took, notBefore)
}

// A request id is applied once: repeating it, by update or by signal,
// answers with the first result and changes nothing, even while the event
// is blocked again.
func TestRepeatedRepairRequestIsAppliedOnce(t *testing.T) {
	t.Parallel()
	b := setupBlockedAtEvt2(t)
	first := b.repairAt(time.Hour, "u-1", repairReq("r-1", workflows.ActionRetry, "evt-2")) // fails again
	blockedAgain := b.observeAt(2*time.Hour - time.Second)
	repeated := b.repairAt(2*time.Hour, "u-2", repairReq("r-1", workflows.ActionRetry, "evt-2"))
	b.repairSignalAt(2*time.Hour+time.Minute, repairReq("r-1", workflows.ActionRetry, "evt-2"))
	still := b.observeAt(3*time.Hour - time.Second)
	b.healAt(3*time.Hour, "evt-2")
	last := b.repairAt(3*time.Hour, "u-3", repairReq("r-2", workflows.ActionRetry, "evt-2"))
	took := b.run(qinput(maxAttempts(2)))

	requireApplied(t, first, workflows.RepairResult{RequestID: "r-1", Action: "retry", EventID: "evt-2", Version: 2, AuditID: 1})
	requireBlockedAt(t, blockedAgain, "evt-2", 2, "Unroutable")
	require.Equal(t, append(ids(1), repeat("evt-2", 4)...), blockedAgain.calls.attempts)
	require.Len(t, blockedAgain.calls.quarantined, 2)

	requireApplied(t, repeated, workflows.RepairResult{RequestID: "r-1", Action: "retry", EventID: "evt-2", Version: 2, AuditID: 1, Duplicate: true})
	requireBlockedAt(t, still, "evt-2", 2, "Unroutable")
	require.Empty(t, still.state.Rejected, "a repeated request id is not an invalid request")
	require.Equal(t, blockedAgain.calls, still.calls, "the repeated request id did something")

	requireApplied(t, last, workflows.RepairResult{RequestID: "r-2", Action: "retry", EventID: "evt-2", Version: 2, AuditID: 2})
	b.requireIdleCompletion(t, took, 3*time.Hour)
	c := b.fakes.calls()
	require.Len(t, c.repairs, 2)
	require.Equal(t, ids(1, 2, 3), c.published)
}

// setupBlockedAtEvt2 is a bundle whose workflow, run with maxAttempts(2),
// blocks at evt-2 (retryable "Unroutable" until healed) within seconds:
// events 1 to 3 arrive after a second.
func setupBlockedAtEvt2(t *testing.T) *qbundle {
	t.Helper()
	b := qsetup(t)
	b.fakes.fail("evt-2", "Unroutable", -1)
	b.signalAt(time.Second, 1, 2, 3)
	return b
}

func TestRepairBySignal(t *testing.T) {
	t.Parallel()
	b := qsetup(t)
	b.fakes.fail("evt-2", "Unroutable", -1)
	b.signalAt(time.Second, 1)
	b.repairSignalAt(5*time.Second, repairReq("s-0", workflows.ActionSkip, "evt-1"))
	b.signalAt(10*time.Second, 2, 3)
	b.repairSignalAt(time.Hour, repairReq("s-1", workflows.ActionSkip, "evt-3"))
	noActor := repairReq("s-2", workflows.ActionSkip, "evt-2")
	noActor.Actor = ""
	b.repairSignalAt(time.Hour+time.Minute, noActor)
	rejected := b.observeAt(2*time.Hour - time.Second)
	b.repairSignalAt(2*time.Hour, repairReq("s-3", workflows.ActionSkip, "evt-2"))
	took := b.run(qinput(maxAttempts(2)))

	requireBlockedAt(t, rejected, "evt-2", 2, "Unroutable")
	require.Empty(t, rejected.calls.repairs)
	require.Len(t, rejected.state.Rejected, 3)
	for i, want := range [][]string{
		{"skip evt-1 (request s-0)", "is not blocked"},
		{"skip evt-3 (request s-1)", "not the blocked event"},
		{"skip evt-2 (request s-2)", "actor is empty"},
	} {
		for _, w := range want {
			require.Contains(t, rejected.state.Rejected[i], w)
		}
	}

	b.requireIdleCompletion(t, took, 2*time.Hour)
	c := b.fakes.calls()
	require.Equal(t, []workflows.RepairInput{{
		Request: repairReq("s-3", workflows.ActionSkip, "evt-2"), AggregateType: "order", AggregateID: "o-1", Version: 2,
	}}, c.repairs)
	require.Equal(t, ids(1, 3), c.published)
	require.Equal(t, append(append(ids(1), repeat("evt-2", 2)...), "evt-3"), c.attempts)
}

// One request without an event id, expecting an error class, is what a
// batch signal by query sends every blocked aggregate: it repairs whatever
// is blocked there when it is blocked with that class, audited under
// "<request id>/<event id>"; with another class it is rejected, and the
// rejection is in the memo (history, UI), not only in the state query.
func TestRepairBySignalByErrorClass(t *testing.T) {
	t.Parallel()
	b := setupBlockedAtEvt2(t)
	byClass := func(class string) workflows.RepairRequest {
		return workflows.RepairRequest{RequestID: "batch-1", Action: workflows.ActionRetry, ExpectErrorClass: class, Actor: "ops", Reason: "queue bound"}
	}
	noClass := byClass("")
	noClass.RequestID = "batch-0"
	b.repairSignalAt(time.Hour-2*time.Second, noClass)
	b.repairSignalAt(time.Hour-time.Second, byClass("PayloadTooLarge"))
	rejected := b.observeAt(time.Hour - time.Second/2)
	b.healAt(time.Hour, "evt-2")
	b.repairSignalAt(time.Hour, byClass("Unroutable"))
	b.run(qinput(maxAttempts(2)))

	require.NoError(t, rejected.err)
	require.Len(t, rejected.state.Rejected, 2)
	require.Contains(t, rejected.state.Rejected[0], "event_id is empty: name the blocked event, or set expect_error_class")
	require.Contains(t, rejected.state.Rejected[1], "blocked at event evt-2 (v2) with error class Unroutable, not the expected PayloadTooLarge")
	require.Empty(t, rejected.calls.repairs)
	require.Len(t, b.sa.memos, 2)
	require.Contains(t, b.sa.memos[1][workflows.MemoRepairRejected], "not the expected PayloadTooLarge")

	c := b.fakes.calls()
	want := byClass("Unroutable")
	want.EventID, want.RequestID = "evt-2", "batch-1/evt-2"
	require.Equal(t, []workflows.RepairInput{{Request: want, AggregateType: "order", AggregateID: "o-1", Version: 2}}, c.repairs)
	require.Equal(t, ids(1, 2, 3), c.published)
}

// The same request by update: a validator error for a class that does not
// match, the blocked event's audit for one that does; a repeat of the
// request id answers with the first result.
func TestRepairByUpdateByErrorClass(t *testing.T) {
	t.Parallel()
	b := setupBlockedAtEvt2(t)
	req := workflows.RepairRequest{RequestID: "batch-2", Action: workflows.ActionSkip, ExpectErrorClass: "Timeout", Actor: "ops", Reason: "gone"}
	wrong := b.repairAt(time.Hour, "u-0", req)
	req.ExpectErrorClass = "Unroutable"
	right := b.repairAt(time.Hour+time.Second, "u-1", req)
	again := b.repairAt(time.Hour+2*time.Second, "u-2", req)
	b.run(qinput(maxAttempts(2)))

	require.ErrorContains(t, wrong.rejected, "with error class Unroutable, not the expected Timeout")
	requireApplied(t, right, workflows.RepairResult{RequestID: "batch-2", Action: "skip", EventID: "evt-2", Version: 2, AuditID: 1})
	require.True(t, again.completed)
	require.True(t, again.result.Duplicate)
	c := b.fakes.calls()
	require.Len(t, c.repairs, 1)
	require.Equal(t, "batch-2/evt-2", c.repairs[0].Request.RequestID)
	require.Equal(t, ids(1, 3), c.published)
}

// A repair that arrives while another's activity is running is refused:
// the blocked event is decided once.
func TestConcurrentRepairIsRejected(t *testing.T) {
	t.Parallel()
	b := setupBlockedAtEvt2(t)
	b.healAt(time.Hour, "evt-2")
	var first *update
	b.env.RegisterDelayedCallback(func() {
		first = &update{}
		b.env.UpdateWorkflow(workflows.RepairUpdate, "u-1", first, repairReq("r-1", workflows.ActionRetry, "evt-2"))
		b.env.SignalWorkflow(workflows.RepairSignal, repairReq("r-2", workflows.ActionSkip, "evt-2"))
	}, time.Hour)
	after := b.observeAt(time.Hour + time.Second)
	b.run(qinput(maxAttempts(2)))

	requireApplied(t, first, workflows.RepairResult{RequestID: "r-1", Action: "retry", EventID: "evt-2", Version: 2, AuditID: 1})
	require.NoError(t, after.err)
	require.Len(t, after.state.Rejected, 1)
	require.Contains(t, after.state.Rejected[0], "(request r-2): another repair of this event is in progress")
	c := b.fakes.calls()
	require.Len(t, c.repairs, 1)
	require.Equal(t, ids(1, 2, 3), c.published)
}

func TestPoisonPolicySkip(t *testing.T) {
	t.Parallel()
	b := qsetup(t)
	b.fakes.fail("evt-2", "Unroutable", -1)
	b.signalAt(time.Second, 1, 2, 3)
	took := b.run(qinput(map[string]workflows.EventPolicy{
		"order.changed": {MaxAttempts: 2, OnPoison: workflows.OnPoisonSkip},
		"*":             {MaxAttempts: 5, OnPoison: workflows.OnPoisonBlock},
	}))

	// No repair was sent: the workflow carried on by itself and went idle.
	b.requireIdleCompletion(t, took, time.Minute)
	require.Less(t, took, time.Hour)
	c := b.fakes.calls()
	require.Equal(t, ids(1, 3), c.published)
	require.Equal(t, append(append(ids(1), repeat("evt-2", 2)...), "evt-3"), c.attempts)
	require.Len(t, c.quarantined, 1)
	require.Equal(t, "Unroutable", c.quarantined[0].ErrorClass)
	require.Len(t, c.repairs, 1)
	r := c.repairs[0]
	require.Equal(t, workflows.RepairRequest{
		RequestID: "policy-skip/evt-2",
		Action:    "policy-skip",
		EventID:   "evt-2",
		Actor:     "ferry",
		Reason:    r.Request.Reason,
	}, r.Request)
	require.Contains(t, r.Request.Reason, "on_poison=skip")
	require.Contains(t, r.Request.Reason, "Unroutable")
	require.Equal(t, int64(2), r.Version)
	require.Equal(t, "order", r.AggregateType)
	require.Equal(t, "o-1", r.AggregateID)
	require.Empty(t, b.sa.upserts, "a skipped event must not mark the aggregate blocked")
}

// Each event is retried by its own type's policy, and types without one
// fall back to "*".
func TestPolicyPerEventType(t *testing.T) {
	t.Parallel()
	b := qsetup(t)
	b.fakes.fail("pay-1", "Unroutable", -1)
	b.fakes.fail("ord-2", "Unroutable", -1)
	b.fakes.fail("pay-4", "Unroutable", -1)
	b.env.RegisterDelayedCallback(func() {
		b.env.SignalWorkflow(workflows.EventsSignal, workflows.EventsSignalArg{Events: []workflows.EventRef{
			{ID: "pay-1", Version: 1, Type: "payment.captured"},
			{ID: "ord-2", Version: 2, Type: "order.changed"},
			{ID: "ord-3", Version: 3, Type: "order.changed"},
			{ID: "pay-4", Version: 4, Type: "payment.captured"},
		}})
	}, time.Second)
	b.run(qinput(map[string]workflows.EventPolicy{
		"payment.captured": {MaxAttempts: 2, OnPoison: workflows.OnPoisonSkip},
		"*":                {MaxAttempts: 4, OnPoison: workflows.OnPoisonSkip},
	}))

	require.True(t, b.env.IsWorkflowCompleted())
	require.NoError(t, b.env.GetWorkflowError())
	c := b.fakes.calls()
	want := slices.Concat(repeat("pay-1", 2), repeat("ord-2", 4), []string{"ord-3"}, repeat("pay-4", 2))
	require.Equal(t, want, c.attempts)
	require.Equal(t, []string{"ord-3"}, c.published)
	var skipped []string
	for _, r := range c.repairs {
		require.Equal(t, "policy-skip", r.Request.Action)
		skipped = append(skipped, r.Request.EventID)
	}
	require.Equal(t, []string{"pay-1", "ord-2", "pay-4"}, skipped)
}

// An outage of the broker is not a poison event: its quarantine is retried
// without an operator every InfraRetryInterval until the broker is back.
func TestBrokerOutageRetriesItself(t *testing.T) {
	t.Parallel()
	b := qsetup(t)
	// Two rounds of two attempts fail; the third round succeeds.
	b.fakes.fail("evt-2", workflows.ErrClassBroker, 4)
	b.signalAt(time.Second, 1, 2, 3)
	first := b.observeAt(workflows.InfraRetryInterval)
	second := b.observeAt(workflows.InfraRetryInterval + time.Minute)
	took := b.run(qinput(maxAttempts(2)))

	requireBlockedAt(t, first, "evt-2", 2, workflows.ErrClassBroker)
	require.Equal(t, append(ids(1), repeat("evt-2", 2)...), first.calls.attempts)
	requireBlockedAt(t, second, "evt-2", 2, workflows.ErrClassBroker)
	require.Equal(t, append(ids(1), repeat("evt-2", 4)...), second.calls.attempts)
	require.Len(t, second.calls.quarantined, 2)

	b.requireIdleCompletion(t, took, 2*workflows.InfraRetryInterval)
	c := b.fakes.calls()
	require.Empty(t, c.repairs, "nobody repaired it")
	require.Equal(t, ids(1, 2, 3), c.published)

	// Each round starts InfraRetryInterval after the quarantine before it.
	times := b.fakes.attemptTimes("evt-2")
	require.Len(t, times, 5)
	since1, since2 := first.state.Blocked.Since, second.state.Blocked.Since
	require.WithinDuration(t, since1.Add(workflows.InfraRetryInterval), times[2], time.Second)
	require.WithinDuration(t, since2.Add(workflows.InfraRetryInterval), times[4], time.Second)

	require.Len(t, b.sa.upserts, 4)
	for i, want := range []map[string]any{blockedAttrs(first.state.Blocked), unblockedAttrs, blockedAttrs(second.state.Blocked), unblockedAttrs} {
		require.Equal(t, want, b.sa.upserts[i].attrs, "upsert %d", i)
	}
}

// Cancelling an aggregate that waits out a broker outage ends it: no
// retry, and the search attributes still show where it was blocked.
func TestCancelDuringBrokerOutage(t *testing.T) {
	t.Parallel()
	b := qsetup(t)
	b.fakes.fail("evt-2", workflows.ErrClassBroker, -1)
	b.signalAt(time.Second, 1, 2, 3)
	b.cancelAt(time.Minute)
	b.run(qinput(maxAttempts(2)))

	require.True(t, b.env.IsWorkflowCompleted())
	err := b.env.GetWorkflowError()
	require.True(t, temporal.IsCanceledError(err), "want cancelled, got %v", err)
	c := b.fakes.calls()
	require.Equal(t, append(ids(1), repeat("evt-2", 2)...), c.attempts)
	require.Len(t, c.quarantined, 1)
	require.Len(t, b.sa.upserts, 1)
	require.Equal(t, true, b.sa.upserts[0].attrs[workflows.SABlocked])
}

func TestContinueAsNewWhileBlocked(t *testing.T) {
	t.Parallel()
	b := setupBlockedAtEvt2(t)
	b.repairAt(time.Hour, "u-1", repairReq("r-1", workflows.ActionRetry, "evt-2")) // fails again
	// Taken in while blocked: the new run must get it too.
	b.signalAt(90*time.Minute, 4)
	before := b.observeAt(2*time.Hour - time.Second)
	// The delayed callback's workflow task finds the suggestion.
	b.env.RegisterDelayedCallback(func() { b.env.SetContinueAsNewSuggested(true) }, 2*time.Hour)
	in := qinput(maxAttempts(2))
	b.run(in)

	requireBlockedAt(t, before, "evt-2", 2, "Unroutable")
	next := decodeContinueAsNew(t, b.env.GetWorkflowError())
	want := in
	want.Resumed = true
	want.Delivered = 1
	want.Pending = evs(2, 3, 4)
	want.Blocked = before.state.Blocked
	want.Repairs = []workflows.RepairResult{{RequestID: "r-1", Action: "retry", EventID: "evt-2", Version: 2, AuditID: 1}}
	require.Equal(t, want, next)

	// The new run starts blocked: it neither reloads the cursor nor tries
	// the event again, knows the earlier request, and carries on once
	// repaired.
	b2 := qsetup(t)
	resumed := b2.observeAt(time.Second)
	repeated := b2.repairAt(time.Hour, "u-1", repairReq("r-1", workflows.ActionRetry, "evt-2"))
	still := b2.observeAt(2*time.Hour - time.Second)
	skip := b2.repairAt(2*time.Hour, "u-2", repairReq("r-2", workflows.ActionSkip, "evt-2"))
	took := b2.run(next)

	require.NoError(t, resumed.err)
	require.Equal(t, workflows.State{Delivered: 1, Pending: []int64{2, 3, 4}, Blocked: next.Blocked, Unread: unread(0)}, resumed.state)
	requireApplied(t, repeated, workflows.RepairResult{RequestID: "r-1", Action: "retry", EventID: "evt-2", Version: 2, AuditID: 1, Duplicate: true})
	requireBlockedAt(t, still, "evt-2", 2, "Unroutable")
	require.Empty(t, still.calls.attempts, "the new run tried the blocked event without a repair")
	requireApplied(t, skip, workflows.RepairResult{RequestID: "r-2", Action: "skip", EventID: "evt-2", Version: 2, AuditID: 1})
	b2.requireIdleCompletion(t, took, 2*time.Hour)
	c := b2.fakes.calls()
	require.Equal(t, ids(3, 4), c.attempts)
	require.Equal(t, ids(3, 4), c.published)
	require.Len(t, c.repairs, 1)
}

// A blocked run with MaxBlockedRefs keeps that many references (the
// lowest versions) and hands the others back, so neither its state nor its
// continue-as-new input grows with the events that keep coming; the
// repair releases them, and once the poller signals them again they go
// out in order.
func TestBlockedRunKeepsBoundedReferences(t *testing.T) {
	t.Parallel()
	b := setupBlockedAtEvt2(t) // 1, 2, 3; blocked at 2
	b.signalAt(time.Minute, 6, 7, 4)
	b.signalAt(2*time.Minute, 5, 8)
	blocked := b.observeAt(time.Hour - time.Second)
	b.env.RegisterDelayedCallback(func() { b.env.SetContinueAsNewSuggested(true) }, time.Hour)
	in := qinput(maxAttempts(2))
	in.MaxBlockedRefs = 3
	b.run(in)

	require.NoError(t, blocked.err)
	require.Equal(t, []int64{2, 3, 4}, blocked.state.Pending)
	var held []string
	for _, h := range b.fakes.holds {
		require.Equal(t, "evt-2", h.BlockedEventID)
		held = append(held, h.EventIDs...)
	}
	require.Equal(t, ids(6, 7, 5, 8), held, "the versions above the bound, as they were dropped")
	next := decodeContinueAsNew(t, b.env.GetWorkflowError())
	require.Equal(t, evs(2, 3, 4), next.Pending)
	require.True(t, next.Held)
	require.Equal(t, 3, next.MaxBlockedRefs)

	// The new run: still bounded; the repair releases the held events,
	// which the poller signals again.
	b2 := qsetup(t)
	b2.signalAt(time.Minute, 9)
	b2.healAt(time.Hour, "evt-2")
	b2.repairAt(time.Hour, "u-1", repairReq("r-1", workflows.ActionRetry, "evt-2"))
	b2.signalAt(time.Hour+10*time.Second, 5, 6, 7, 8, 9)
	b2.run(next)

	require.Equal(t, ids(9), b2.fakes.holds[0].EventIDs)
	require.Equal(t, []workflows.ReleaseHeldInput{{AggregateType: "order", AggregateID: "o-1"}}, b2.fakes.releases)
	require.Equal(t, ids(2, 3, 4, 5, 6, 7, 8, 9), b2.fakes.calls().published)
}

// Without MaxBlockedRefs (runs started before it) nothing is held: the
// signals wait in the channel as recorded histories have them.
func TestBlockedRunWithoutBoundHoldsNothing(t *testing.T) {
	t.Parallel()
	b := setupBlockedAtEvt2(t)
	b.signalAt(time.Minute, 4, 5, 6, 7)
	b.signalAt(2*time.Minute, 8)
	// The state says what the run has not taken (what the reconciler must
	// not take for lost), in signals.
	o := b.observeAt(3 * time.Minute)
	b.healAt(time.Hour, "evt-2")
	b.repairAt(time.Hour, "u-1", repairReq("r-1", workflows.ActionRetry, "evt-2"))
	after := b.observeAt(time.Hour + time.Second)
	b.run(qinput(maxAttempts(2)))
	require.Empty(t, b.fakes.holds)
	require.Empty(t, b.fakes.releases)
	require.Equal(t, ids(1, 2, 3, 4, 5, 6, 7, 8), b.fakes.calls().published)
	require.NoError(t, o.err)
	require.Equal(t, []int64{2, 3}, o.state.Pending)
	require.Equal(t, unread(2), o.state.Unread)
	require.NoError(t, after.err)
	require.Equal(t, unread(0), after.state.Unread, "taken once the block ended")
}

func unread(n int) *int { return &n }

func TestReplay(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, in workflows.ReplayInput, fails ...string) (*qbundle, workflows.ReplayResult, error) {
		t.Helper()
		b := qsetup(t)
		for _, id := range fails {
			b.fakes.replayFails[id] = true
		}
		b.env.ExecuteWorkflow(workflows.ReplayWorkflowName, in)
		require.True(t, b.env.IsWorkflowCompleted())
		var res workflows.ReplayResult
		err := b.env.GetWorkflowError()
		if err == nil {
			require.NoError(t, b.env.GetWorkflowResult(&res))
		}
		return b, res, err
	}
	replayInput := func(eventIDs ...string) workflows.ReplayInput {
		return workflows.ReplayInput{RequestID: "rp-1", EventIDs: eventIDs, Reason: "consumer lost its data", Actor: "bob"}
	}

	t.Run("in the given order, one request id per event", func(t *testing.T) {
		t.Parallel()
		b, res, err := run(t, replayInput("e-3", "e-1", "e-2"))
		require.NoError(t, err)
		require.Equal(t, []string{"e-3", "e-1", "e-2"}, res.Replayed)
		var want []workflows.ReplayEventInput
		for _, id := range []string{"e-3", "e-1", "e-2"} {
			want = append(want, workflows.ReplayEventInput{RequestID: "rp-1/" + id, EventID: id, Reason: "consumer lost its data", Actor: "bob"})
		}
		require.Equal(t, want, b.fakes.replays)
	})
	t.Run("stops at the first failure", func(t *testing.T) {
		t.Parallel()
		b, _, err := run(t, replayInput("e-1", "e-2", "e-3"), "e-2")
		require.Error(t, err)
		var appErr *temporal.ApplicationError
		require.True(t, errors.As(err, &appErr))
		require.Equal(t, "NotReplayable", appErr.Type())
		var got []string
		for _, r := range b.fakes.replays {
			got = append(got, r.EventID)
		}
		require.Equal(t, []string{"e-1", "e-2"}, got)
	})
	t.Run("at most MaxReplayEvents", func(t *testing.T) {
		t.Parallel()
		many := make([]string, workflows.MaxReplayEvents)
		for i := range many {
			many[i] = fmt.Sprintf("e-%d", i)
		}
		b, res, err := run(t, replayInput(many...))
		require.NoError(t, err)
		require.Equal(t, many, res.Replayed)
		require.Len(t, b.fakes.replays, workflows.MaxReplayEvents)
	})
	// Started through Temporal directly, not the CLI: refused before the
	// first activity, so nothing is published unaudited.
	for name, tc := range map[string]struct {
		actor, reason, want string
	}{
		"no actor":  {"", "consumer lost its data", "actor is empty"},
		"no reason": {"bob", " ", "reason is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := replayInput("e-1")
			in.Actor, in.Reason = tc.actor, tc.reason
			b, _, err := run(t, in)
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(err, &appErr), "want an application error, got %v", err)
			require.Equal(t, "InvalidReplay", appErr.Type())
			require.True(t, appErr.NonRetryable())
			require.Contains(t, appErr.Error(), tc.want)
			require.Empty(t, b.fakes.replays)
		})
	}
	for name, eventIDs := range map[string][]string{
		"no event ids":       nil,
		"too many event ids": make([]string, workflows.MaxReplayEvents+1),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, _, err := run(t, replayInput(eventIDs...))
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(err, &appErr), "want an application error, got %v", err)
			require.Equal(t, "InvalidReplay", appErr.Type())
			require.True(t, appErr.NonRetryable())
			require.Contains(t, appErr.Error(), "1 to 1000 event ids")
			require.Empty(t, b.fakes.replays)
		})
	}
}

// A one-shot run that was blocked and repaired does not complete at once:
// it idles like a keep-alive run, so a repeated request is answered with
// the first result (what `ferry repair` run twice expects).
func TestOneShotRunIdlesAfterRepair(t *testing.T) {
	t.Parallel()
	b := qsetup(t)
	b.fakes.fail("evt-2", "Unroutable", -1)
	in := qinput(maxAttempts(2))
	in.PublishBatchSize = workflows.DefaultPublishBatchSize
	in.Revision = workflows.Revision1
	in.OneShot = true
	in.Pending = evs(1, 2, 3)
	b.healAt(time.Hour, "evt-2")
	first := b.repairAt(time.Hour, "u-1", repairReq("r-1", workflows.ActionRetry, "evt-2"))
	again := b.repairAt(time.Hour+30*time.Second, "u-2", repairReq("r-1", workflows.ActionRetry, "evt-2"))
	took := b.run(in)

	requireApplied(t, first, workflows.RepairResult{RequestID: "r-1", Action: workflows.ActionRetry, EventID: "evt-2", Version: 2, AuditID: 1})
	require.NoError(t, again.rejected)
	require.NoError(t, again.err)
	require.True(t, again.result.Duplicate, "the repeat was not answered by the run")
	b.requireIdleCompletion(t, took, time.Hour+time.Minute)
	require.Equal(t, ids(1, 2, 3), b.fakes.calls().published)
}
