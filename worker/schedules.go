package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/workflows"
)

// Schedules configures the maintenance schedules a worker keeps in place.
// A Temporal Schedule runs each job once per tick however many workers
// exist, is durable, and shows in the UI (Schedules).
type Schedules struct {
	// Retention is the retention job's input (row and payload age).
	Retention workflows.RetentionInput
	// RetentionEvery; default workflows.DefaultRetentionEvery (1h).
	RetentionEvery time.Duration
	// Reconcile is the reconciler's input (how old a dispatch is stuck).
	Reconcile workflows.ReconcileInput
	// ReconcileEvery; default workflows.DefaultReconcileEvery (5m).
	ReconcileEvery time.Duration
}

// EnsureSchedules creates the schedules "ferry-retention/<task queue>" and
// "ferry-reconcile/<task queue>" (one pair per Ferry deployment sharing a
// namespace), or updates them to s when they exist. Overlapping runs are
// skipped, so a slow retention never runs twice at once.
func EnsureSchedules(ctx context.Context, c client.Client, taskQueue string, s Schedules) error {
	jobs := []struct {
		id, workflow string
		every        time.Duration
		arg          any
	}{
		{workflows.RetentionScheduleID, workflows.RetentionWorkflowName, cmp.Or(s.RetentionEvery, workflows.DefaultRetentionEvery), s.Retention},
		{workflows.ReconcileScheduleID, workflows.ReconcileWorkflowName, cmp.Or(s.ReconcileEvery, workflows.DefaultReconcileEvery), s.Reconcile},
	}
	for _, j := range jobs {
		j.id += "/" + taskQueue
		spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: j.every}}}
		action := &client.ScheduleWorkflowAction{
			ID:        j.id + "-run",
			Workflow:  j.workflow,
			Args:      []any{j.arg},
			TaskQueue: taskQueue,
		}
		_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
			ID:      j.id,
			Spec:    spec,
			Action:  action,
			Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
			Note:    "kept in place by Ferry's workers; change it with their flags, not here",
		})
		if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
			err = c.ScheduleClient().GetHandle(ctx, j.id).Update(ctx, client.ScheduleUpdateOptions{
				DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
					sched := in.Description.Schedule
					sched.Spec = &spec
					sched.Action = action
					return &client.ScheduleUpdate{Schedule: &sched}, nil
				},
			})
		}
		if err != nil {
			return fmt.Errorf("schedule %s: %w", j.id, err)
		}
	}
	return nil
}
