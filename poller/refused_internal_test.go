package poller

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/workflows"
)

// fakeTemporal answers every start and signal-with-start with err (nil:
// accepted), after running during, and records the starts' inputs.
type fakeTemporal struct {
	client.Client
	err    error
	during func()

	mu     sync.Mutex
	starts []workflows.AggregateInput
}

func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, _ client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	if f.during != nil {
		f.during()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts = append(f.starts, args[0].(workflows.AggregateInput))
	return nil, f.err
}

func (f *fakeTemporal) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	if f.during != nil {
		f.during()
	}
	return nil, f.err
}

func statusOf(t *testing.T, db *ferrytest.DB, id string) (status, lastError string) {
	t.Helper()
	var le *string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT status, last_error FROM outbox_events WHERE id = $1`, id).Scan(&status, &le))
	if le != nil {
		lastError = *le
	}
	return status, lastError
}

// classOf reads the row's last_error_class; "" when NULL.
func classOf(t *testing.T, db *ferrytest.DB, id string) string {
	t.Helper()
	var class string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT coalesce(last_error_class, '') FROM outbox_events WHERE id = $1`, id).Scan(&class))
	return class
}

// makeClaimable ends every pending row's backoff.
func makeClaimable(t *testing.T, db *ferrytest.DB) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `UPDATE outbox_events SET next_attempt_at = now() WHERE status = 'pending'`)
	require.NoError(t, err)
}

// A start Temporal refuses as invalid quarantines the aggregate's rows on
// their MaxRefusedAttempts-th claim, with Temporal's reason, and counts
// them; an outage (Unavailable) keeps its rows pending however often it
// fails.
func TestRefusedStartQuarantinesAfterBoundedAttempts(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	refuse := &fakeTemporal{err: serviceerror.NewInvalidArgument("WorkflowId length exceeds limit.")}
	p := newPoller(t, db.Pool, Config{Temporal: refuse, Metrics: m.Relay()})
	down := newPoller(t, db.Pool, Config{Temporal: &fakeTemporal{err: serviceerror.NewUnavailable("connection refused")}})

	ids := []string{insertEvent(t, db.Pool, "order", "bad", nil), insertEvent(t, db.Pool, "order", "bad", nil)}
	for attempt := 1; attempt <= 3; attempt++ {
		makeClaimable(t, db)
		_, err := p.RunOnce(ctx)
		require.ErrorContains(t, err, "WorkflowId length exceeds limit")
		want := "pending"
		if attempt == 3 {
			want = "quarantined"
		}
		for _, id := range ids {
			st, _ := statusOf(t, db, id)
			require.Equal(t, want, st, "attempt %d", attempt)
			require.Equal(t, ErrClassTemporalRefused, classOf(t, db, id), "the class beside the error, attempt %d", attempt)
		}
	}
	_, lastErr := statusOf(t, db, ids[0])
	require.Contains(t, lastErr, "quarantined (TemporalRefused)")
	require.Contains(t, lastErr, "WorkflowId length exceeds limit")
	require.Equal(t, 2.0, ferrytest.Sample(t, reg, "ferry_events_quarantined_total",
		map[string]string{"event_type": "test.happened", "error_class": ErrClassTemporalRefused}))
	makeClaimable(t, db)
	n, err := p.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a quarantined row was claimed again")

	outage := insertEvent(t, db.Pool, "order", "fine", nil)
	for range 5 {
		makeClaimable(t, db)
		_, err := down.RunOnce(ctx)
		require.ErrorContains(t, err, "connection refused")
	}
	st, lastErr := statusOf(t, db, outage)
	require.Equal(t, "pending", st, "an outage quarantined a row")
	require.Contains(t, lastErr, "connection refused")
	require.Empty(t, classOf(t, db, outage), "an outage has no class")
}

// A row the (blocked) workflow handed back while its start was in flight
// stays pending, out of the claim until released; the others are marked.
// New runs get the bound on what a blocked run keeps.
func TestDispatchDoesNotMarkHeldRows(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	kept := insertEvent(t, db.Pool, "order", "o-1", nil)
	held := insertEvent(t, db.Pool, "order", "o-1", nil)
	rec := &fakeTemporal{during: func() {
		_, err := db.Pool.Exec(ctx, `UPDATE outbox_events SET status = 'pending', next_attempt_at = now() + interval '1 hour',
			last_error = $2 WHERE id = $1`, held, workflows.HeldPrefix+"aggregate blocked")
		require.NoError(t, err)
	}}
	p := newPoller(t, db.Pool, Config{Temporal: rec})
	_, err := p.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, workflows.CurrentRevision, rec.starts[0].Revision)
	require.Zero(t, rec.starts[0].MaxBlockedRefs, "the run asks its worker for its settings")
	st, _ := statusOf(t, db, kept)
	require.Equal(t, "dispatched", st)
	st, lastErr := statusOf(t, db, held)
	require.Equal(t, "pending", st)
	require.Contains(t, lastErr, workflows.HeldPrefix)
	n, err := p.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a held row was claimed before its release")
}
