package e2e

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/cmd/ferry/status"
	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/internal/sandbox/payprovider"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

// `ferry status` against the live system: a payment whose outcome is
// unknown shows under "Effects waiting on reconciliation", first as
// reconciling, then escalated with the commands to decide it, and never
// under "Blocked aggregates" (whose repair commands do not apply to it);
// once the provider answers it is gone.
func TestStatusShowsEffectsWaitingOnReconciliation(t *testing.T) {
	t.Parallel()
	e := setupEffects(t, effectsOpts{payment: effects.PaymentParams{EscalateAfter: 4 * time.Second}})
	ctx := context.Background()
	e.provider.SetFaults(func(r payprovider.Request) payprovider.Fault {
		if r.Method == "POST" && r.Seen == 0 {
			return payprovider.FaultErrorAfterCommit
		}
		return payprovider.FaultError
	})
	id := e.order(t, "unknown", "created", 1250)
	wfID := workflows.EffectWorkflowID("charge", id)

	collect := func() status.Snapshot {
		t.Helper()
		s, err := status.Collect(ctx, e.db.Pool, tclient, nil, namespace, e.taskQueue)
		require.NoError(t, err)
		return s
	}
	waiting := func(s status.Snapshot) *status.EffectWaiting {
		for i := range s.EffectsWaiting {
			if s.EffectsWaiting[i].WorkflowID == wfID {
				return &s.EffectsWaiting[i]
			}
		}
		return nil
	}
	var snap status.Snapshot
	waitFor(t, time.Minute, "the payment listed as reconciling", func() bool {
		snap = collect()
		w := waiting(snap)
		return w != nil && w.Phase == effects.PhaseReconciling
	})
	require.Equal(t, chargeKey(id), waiting(snap).Key)
	require.False(t, waiting(snap).Since.IsZero(), "unknown since, from the memo")

	waitFor(t, time.Minute, "the payment listed as escalated", func() bool {
		snap = collect()
		w := waiting(snap)
		return w != nil && w.Phase == effects.PhaseEscalated
	})
	require.Equal(t, effects.ErrClassPaymentUnknown, waiting(snap).ErrorClass)
	for _, b := range snap.Blocked {
		require.NotEqual(t, wfID, b.WorkflowID, "an escalated effect is no blocked aggregate")
	}
	var screen bytes.Buffer
	status.Render(&screen, snap, false)
	require.Contains(t, screen.String(), "temporal workflow signal --workflow-id '"+wfID+"' --name "+effects.ResolveSignal)

	e.provider.SetFaults(nil)
	waitFor(t, time.Minute, "the payment to leave the list", func() bool { return waiting(collect()) == nil })
}

// The maintenance schedules' last completed runs show with what they did:
// rows deleted, rows re-dispatched, the drift check.
func TestStatusShowsTheLastMaintenanceRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startFerry(t, ferryOpts{schedules: &worker.Schedules{RetentionEvery: time.Hour, ReconcileEvery: time.Hour}})
	ctx := context.Background()
	t.Cleanup(func() {
		for _, id := range []string{workflows.RetentionScheduleID, workflows.ReconcileScheduleID} {
			_ = tclient.ScheduleClient().GetHandle(ctx, id+"/"+e.taskQueue).Delete(ctx)
		}
	})
	e.commitN(t, 4, 2)
	waitFor(t, time.Minute, "every event published", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`) == 4
	})
	for _, id := range []string{workflows.RetentionScheduleID, workflows.ReconcileScheduleID} {
		require.NoError(t, tclient.ScheduleClient().GetHandle(ctx, id+"/"+e.taskQueue).Trigger(ctx, client.ScheduleTriggerOptions{}))
	}
	var snap status.Snapshot
	waitFor(t, time.Minute, "both runs' results", func() bool {
		var err error
		snap, err = status.Collect(ctx, e.db.Pool, tclient, nil, namespace, e.taskQueue)
		require.NoError(t, err)
		return snap.Reconcile != nil && snap.Reconcile.Result != nil && snap.Retention != nil && snap.Retention.Result != nil
	})
	require.NotNil(t, snap.Reconcile.Result.Drift)
	require.Equal(t, 2, snap.Reconcile.Result.Drift.Sampled, "the two aggregates of this test")
	require.Empty(t, snap.Reconcile.Result.Drift.Drifted)
	require.Zero(t, snap.Retention.Result.Deleted, "nothing is 30 days old")
	var screen bytes.Buffer
	status.Render(&screen, snap, false)
	require.Contains(t, screen.String(), "; last completed: deleted 0 delivered rows\n")
	require.Contains(t, screen.String(), "; last completed: re-dispatched 0 rows; drift check: 0 of 2 sampled aggregates drifted\n")
}

// `ferry ping` names the Temporal it talks to and that its persistence is
// the embedded server's SQLite.
func TestPingNamesTemporalPersistence(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	code, out := ferry(t, []string{"FERRY_POSTGRES_URL=" + db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporalAddr, "FERRY_TEMPORAL_NAMESPACE=" + namespace}, "ping")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "at "+temporalAddr+" (cluster active): persistence SQLite (sqlite), visibility sqlite, history shards 1")
}
