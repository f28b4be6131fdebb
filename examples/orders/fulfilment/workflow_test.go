package fulfilment_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/examples/orders"
	"github.com/ferry-outbox/ferry/examples/orders/fulfilment"
	"github.com/ferry-outbox/ferry/ferrytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// envelope is an event of the order as Ferry's destinations deliver it.
func envelope(orderID, eventType string, version int64) destination.Envelope {
	return destination.Envelope{
		EnvelopeVersion: destination.EnvelopeVersion, Destination: "fulfilment",
		EventID: uuid.NewString(), EventType: eventType,
		AggregateType: orders.AggregateType, AggregateID: orderID, AggregateVersion: version,
		SchemaVersion: 1, Payload: []byte(`{}`),
	}
}

// setup is a test workflow environment whose activity marks a real row of
// a real orders table, in the test's own schema.
func setup(t *testing.T, status string) (*testsuite.TestWorkflowEnvironment, string, func() string) {
	t.Helper()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	require.NoError(t, orders.Migrate(ctx, db.Pool))
	orderID := uuid.NewString()
	_, err := db.Pool.Exec(ctx, `INSERT INTO orders (id, customer, total_cents, status) VALUES ($1, 'ada', 4200, $2)`, orderID, status)
	require.NoError(t, err)
	acts, err := fulfilment.NewActivities(db.Pool)
	require.NoError(t, err)

	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(fulfilment.Workflow, workflow.RegisterOptions{Name: fulfilment.WorkflowName})
	env.RegisterActivityWithOptions(acts.MarkFulfilling, activity.RegisterOptions{Name: fulfilment.MarkFulfillingActivity})
	rowStatus := func() (s string) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, orderID).Scan(&s))
		return s
	}
	return env, orderID, rowStatus
}

func query(t *testing.T, env *testsuite.TestWorkflowEnvironment) fulfilment.State {
	t.Helper()
	v, err := env.QueryWorkflow(fulfilment.QueryState)
	require.NoError(t, err)
	var st fulfilment.State
	require.NoError(t, v.Get(&st))
	return st
}

// Created, then paid, with repeats of paid and created arriving in the
// same task (Dedup drops them): the order is marked fulfilling and the run
// completes.
func TestWorkflowCreatedThenPaid(t *testing.T) {
	t.Parallel()
	env, orderID, rowStatus := setup(t, "paid")
	created, paid := envelope(orderID, "created", 1), envelope(orderID, "paid", 2)

	env.RegisterDelayedCallback(func() {
		st := query(t, env)
		require.Equal(t, fulfilment.StatusCreated, st.Status)
		require.Equal(t, []fulfilment.Seen{{EventID: created.EventID, EventType: "created", AggregateVersion: 1}}, st.Events)
		env.SignalWorkflow(fulfilment.SignalPaid, paid)
		env.SignalWorkflow(fulfilment.SignalPaid, paid) // a repeat that got past the server
		env.SignalWorkflow(fulfilment.SignalPaid, created)
	}, time.Minute)
	env.ExecuteWorkflow(fulfilment.WorkflowName, created)

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st fulfilment.State
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Equal(t, fulfilment.State{OrderID: orderID, Status: fulfilment.StatusFulfilling, Repeats: 2, Events: []fulfilment.Seen{
		{EventID: created.EventID, EventType: "created", AggregateVersion: 1},
		{EventID: paid.EventID, EventType: "paid", AggregateVersion: 2},
	}}, st)
	require.Equal(t, "fulfilling", rowStatus())
}

// An order whose row is not paid: the activity refuses once, without
// retries, and the run fails naming the order.
func TestWorkflowRowNotPaid(t *testing.T) {
	t.Parallel()
	env, orderID, rowStatus := setup(t, "created")
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(fulfilment.SignalPaid, envelope(orderID, "paid", 2)) }, time.Second)
	env.ExecuteWorkflow(fulfilment.WorkflowName, envelope(orderID, "created", 1))

	require.True(t, env.IsWorkflowCompleted())
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &appErr)
	require.Equal(t, fulfilment.ErrTypeNotPaid, appErr.Type())
	require.Contains(t, appErr.Error(), orderID)
	require.Equal(t, "created", rowStatus())
}

// A route that starts the workflow with another event is a configuration
// error, reported as such.
func TestWorkflowStartedByAnotherEvent(t *testing.T) {
	t.Parallel()
	env, orderID, _ := setup(t, "created")
	env.ExecuteWorkflow(fulfilment.WorkflowName, envelope(orderID, "paid", 2))
	require.True(t, env.IsWorkflowCompleted())
	require.ErrorContains(t, env.GetWorkflowError(), "check the route")
}

// The routes are valid Ferry destinations and name the worker's queue.
func TestRoutes(t *testing.T) {
	t.Parallel()
	dests, err := destination.ParseAll(fulfilment.Routes("orders-fulfilment"))
	require.NoError(t, err)
	r, err := destination.NewRouter(dests)
	require.NoError(t, err)
	start, skip := r.For(orders.AggregateType, "created")
	require.False(t, skip, "order.created still goes to RabbitMQ")
	require.Len(t, start, 1)
	require.Equal(t, destination.Start, start[0].Action)
	require.Equal(t, fulfilment.WorkflowName, start[0].WorkflowType)
	require.Equal(t, "orders-fulfilment", start[0].TaskQueue)
	signal, _ := r.For(orders.AggregateType, "paid")
	require.Len(t, signal, 1)
	require.Equal(t, destination.Signal, signal[0].Action)
	require.Equal(t, fulfilment.SignalPaid, signal[0].Signal)
	for _, rt := range append(start, signal...) {
		id, err := rt.RenderID(destination.Envelope{AggregateType: "order", AggregateID: "o-17"})
		require.NoError(t, err)
		require.Equal(t, fulfilment.WorkflowID("o-17"), id)
	}
}
