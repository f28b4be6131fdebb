package activities_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

// A quarantined row no workflow holds is skipped in version order (the
// cursor moves past it) or re-queued by retry, audited once per request id.
func TestRepairUnheld(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	v1, v2, v3 := insert(t, db.Pool, "order", "refused", row{}), insert(t, db.Pool, "order", "refused", row{}), insert(t, db.Pool, "order", "refused", row{})
	_, err := db.Pool.Exec(ctx, `UPDATE outbox_events SET status = 'quarantined', attempts = 3, last_error = 'quarantined (TemporalRefused): x'`)
	require.NoError(t, err)
	req := func(id, action, requestID string) workflows.RepairRequest {
		return workflows.RepairRequest{RequestID: requestID, Action: action, EventID: id, Actor: "ops", Reason: "invalid id"}
	}

	_, err = activities.RepairUnheld(ctx, db.Pool, req(v2.ID, workflows.ActionSkip, "s2"))
	require.ErrorIs(t, err, activities.ErrInvalidRepair)
	require.ErrorContains(t, err, "v1 is not delivered yet")
	_, err = activities.RepairUnheld(ctx, db.Pool, workflows.RepairRequest{RequestID: "x", Action: "skip", EventID: v1.ID, Actor: "ops"})
	require.ErrorIs(t, err, activities.ErrInvalidRepair)

	res, err := activities.RepairUnheld(ctx, db.Pool, req(v1.ID, workflows.ActionSkip, "s1"))
	require.NoError(t, err)
	require.Positive(t, res.AuditID)
	require.Equal(t, int64(1), res.Version)
	require.Equal(t, "skipped", readRow(t, db.Pool, v1.ID).Status)
	require.Equal(t, int64(1), delivered(t, db.Pool, "order", "refused"))
	again, err := activities.RepairUnheld(ctx, db.Pool, req(v1.ID, workflows.ActionSkip, "s1"))
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, res.AuditID, again.AuditID)

	_, err = activities.RepairUnheld(ctx, db.Pool, req(v2.ID, workflows.ActionSkip, "s2"))
	require.NoError(t, err)
	_, err = activities.RepairUnheld(ctx, db.Pool, req(v3.ID, workflows.ActionRetry, "r3"))
	require.NoError(t, err)
	var status string
	var attempts int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT status, attempts FROM outbox_events WHERE id = $1`, v3.ID).Scan(&status, &attempts))
	require.Equal(t, "pending", status)
	require.Zero(t, attempts)
	_, err = activities.RepairUnheld(ctx, db.Pool, req(v3.ID, workflows.ActionSkip, "s3"))
	require.ErrorContains(t, err, "is pending, not quarantined")

	var audits []string
	rows, err := db.Pool.Query(ctx, `SELECT action || ' ' || request_id FROM ferry_repairs ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var a string
		require.NoError(t, rows.Scan(&a))
		audits = append(audits, a)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"skip s1", "skip s2", "retry r3"}, audits)
}
