package worker_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// These tests never reach a Temporal server: polling for real is covered end
// to end in dev/e2e/. Nothing here dials PostgreSQL or RabbitMQ either: the
// activities only need to exist.

// temporalAt returns a lazy client for addr; it dials only when used.
func temporalAt(t *testing.T, addr string) client.Client {
	t.Helper()
	return ferrytest.LazyTemporal(t, addr)
}

func testActivities(t *testing.T) *activities.Activities {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pub, err := broker.New(broker.Config{URL: "amqp://127.0.0.1:1/"})
	require.NoError(t, err)
	target, err := rabbitmq.New(rabbitmq.Config{Publisher: pub})
	require.NoError(t, err)
	acts, err := activities.New(activities.Config{Pool: pool, Broker: target})
	require.NoError(t, err)
	return acts
}

func TestNewRequiresDependencies(t *testing.T) {
	t.Parallel()
	temporal := temporalAt(t, ferrytest.ClosedAddr(t))
	acts := testActivities(t)

	_, err := worker.New(worker.Config{Activities: acts})
	require.ErrorContains(t, err, "Config.Temporal")

	_, err = worker.New(worker.Config{Temporal: temporal})
	require.ErrorContains(t, err, "Config.Activities")

	_, err = worker.New(worker.Config{Temporal: temporal, Activities: acts, MaxConcurrentActivities: -1})
	require.ErrorContains(t, err, "Config.MaxConcurrentActivities -1")

	_, err = worker.New(worker.Config{Temporal: temporal, Activities: acts, WorkflowTaskPollers: 1})
	require.ErrorContains(t, err, "Config.WorkflowTaskPollers 1")

	_, err = worker.New(worker.Config{Temporal: temporal, Activities: acts, Workflow: workflows.Settings{PublishBatchSize: 5000}})
	require.ErrorContains(t, err, "Config.Workflow: Settings.PublishBatchSize 5000")

	_, err = worker.New(worker.Config{Temporal: temporal, Activities: acts,
		Workflow: workflows.Settings{Policies: map[string]workflows.EventPolicy{"order.created": {OnPoison: "drop"}}}})
	require.ErrorContains(t, err, `Settings.Policies["order.created"]: OnPoison "drop"`)
}

func TestNewFillsDefaults(t *testing.T) {
	t.Parallel()
	temporal := temporalAt(t, ferrytest.ClosedAddr(t))
	acts := testActivities(t)

	// Zero MaxConcurrentActivities means the default (64), not "none".
	w, err := worker.New(worker.Config{Temporal: temporal, Activities: acts, MaxConcurrentActivities: 0})
	require.NoError(t, err)
	require.Equal(t, "ferry", w.TaskQueue())

	w, err = worker.New(worker.Config{Temporal: temporal, Activities: acts, TaskQueue: "relay", MaxConcurrentActivities: 1})
	require.NoError(t, err)
	require.Equal(t, "relay", w.TaskQueue())
}

func TestStopWithoutStart(t *testing.T) {
	t.Parallel()
	// A listener that never answers: if Stop talked to Temporal, its
	// connection would wait here.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	w, err := worker.New(worker.Config{Temporal: temporalAt(t, ln.Addr().String()), Activities: testActivities(t)})
	require.NoError(t, err)

	w.Stop()
	w.Stop()

	// Stop is synchronous: a connection it had made would already be in
	// the listener's backlog, so a short deadline is enough.
	require.NoError(t, ln.(*net.TCPListener).SetDeadline(time.Now().Add(100*time.Millisecond)))
	conn, err := ln.Accept()
	if err == nil {
		_ = conn.Close()
	}
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "Stop without Start must not contact Temporal")

	// The SDK panics when a stopped worker is started; Start says so instead.
	require.ErrorContains(t, w.Start(t.Context()), "already stopped")
}

func TestStartFailsWithoutTemporal(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{Temporal: temporalAt(t, ferrytest.ClosedAddr(t)), Activities: testActivities(t)})
	require.NoError(t, err)

	err = w.Start(t.Context())
	require.ErrorContains(t, err, `start worker on task queue "ferry"`)

	// Whatever a failed Start began, Stop ends it (goleak checks), twice.
	w.Stop()
	w.Stop()
}

// recordingRegistry records the names Register uses. The embedded interface
// is nil: any other method would panic, which is what the test wants.
type recordingRegistry struct {
	sdkworker.Registry
	workflows  []string
	activities []string
}

func (r *recordingRegistry) RegisterWorkflowWithOptions(_ any, options workflow.RegisterOptions) {
	r.workflows = append(r.workflows, options.Name)
}

func (r *recordingRegistry) RegisterActivityWithOptions(_ any, options activity.RegisterOptions) {
	r.activities = append(r.activities, options.Name)
}

func TestRegisterUsesWireNames(t *testing.T) {
	t.Parallel()
	var r recordingRegistry

	worker.Register(&r, testActivities(t), workflows.Settings{})

	require.Equal(t, []string{workflows.AggregateWorkflowName, workflows.ReplayWorkflowName, workflows.RetentionWorkflowName, workflows.ReconcileWorkflowName}, r.workflows)
	require.ElementsMatch(t, []string{workflows.PublishEventActivity, workflows.LoadCursorActivity, workflows.PublishBatchActivity, workflows.ReleaseAggregateActivity, workflows.QuarantineActivity, workflows.RepairActivity, workflows.ReplayActivity, workflows.PurgeActivity, workflows.ReconcileActivity, workflows.DriftActivity, workflows.HoldEventsActivity, workflows.ReleaseHeldActivity}, r.activities)
}
