package fulfilment

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/ferry-outbox/ferry/destination"
)

// Wire names: the routes, the worker's registrations and anything that
// queries or signals a Fulfilment use them. Renaming one breaks running
// workflows and the routes of deployed services.
const (
	// WorkflowName is the registered workflow type.
	WorkflowName = "orders.Fulfilment"
	// SignalPaid is the signal order.paid arrives on.
	SignalPaid = "paid"
	// QueryState answers the run's State.
	QueryState = "state"
	// MarkFulfillingActivity is Activities.MarkFulfilling's registered name.
	MarkFulfillingActivity = "orders.MarkFulfilling"
)

// Statuses of a fulfilment, in the order a run goes through them.
const (
	StatusCreated    = "created"    // started by order.created; waits for the payment
	StatusPaid       = "paid"       // order.paid arrived; the order is being marked
	StatusFulfilling = "fulfilling" // the order's row says fulfilling
)

// WorkflowID is the ID of an order's fulfilment, the one Routes gives it.
func WorkflowID(orderID string) string { return "fulfilment-" + orderID }

// State is what QueryState answers, and the run's result.
type State struct {
	// OrderID is the order's id (the events' aggregate id).
	OrderID string `json:"order_id"`
	// Status: StatusCreated, StatusPaid or StatusFulfilling.
	Status string `json:"status"`
	// Events are the events the run acted on, in the order it received
	// them, each once.
	Events []Seen `json:"events"`
	// Repeats is how many deliveries Dedup dropped as seen before.
	Repeats int `json:"repeats"`
}

// Seen is one event a run acted on.
type Seen struct {
	EventID          string `json:"event_id"`
	EventType        string `json:"event_type"`
	AggregateVersion int64  `json:"aggregate_version"`
}

// MarkInput is MarkFulfilling's input.
type MarkInput struct {
	OrderID string `json:"order_id"`
}

// activityOptions: marking is one short UPDATE; retries wait out a
// PostgreSQL restart, and a refusal (ErrTypeNotPaid) is not retried.
var activityOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:        time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        time.Minute,
		NonRetryableErrorTypes: []string{ErrTypeNotPaid},
	},
}

// Workflow is an order's fulfilment. Its input is the envelope of the
// order.created event that started it (Ferry's start destination); it
// waits for order.paid on SignalPaid, marks the order fulfilling, and
// completes. A repeat of order.paid that Ferry sends after it completed (a
// crash between Temporal taking the signal and Ferry's mark) finds the
// signal in this run's history and is done (package destination).
func Workflow(ctx workflow.Context, created destination.Envelope) (State, error) {
	st := State{OrderID: created.AggregateID}
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (State, error) { return st, nil }); err != nil {
		return st, err
	}
	if created.EventType != "created" {
		return st, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("fulfilment of order %s: started by a %q event, want created (check the route)", created.AggregateID, created.EventType), "BadStart", nil)
	}
	// Dedup lives in the run's state: Ferry delivers an order's events in
	// version order, so anything at or below the last version is a repeat.
	var seen destination.Dedup
	seen.First(created)
	st.Status = StatusCreated
	st.Events = append(st.Events, seenOf(created))

	paid := workflow.GetSignalChannel(ctx, SignalPaid)
	receive := func(ev destination.Envelope) {
		if !seen.First(ev) {
			st.Repeats++
			return
		}
		st.Events = append(st.Events, seenOf(ev))
		if ev.EventType == "paid" && st.Status == StatusCreated {
			st.Status = StatusPaid
		}
	}
	for st.Status == StatusCreated {
		var ev destination.Envelope
		paid.Receive(ctx, &ev)
		receive(ev)
	}

	actx := workflow.WithActivityOptions(ctx, activityOptions)
	if err := workflow.ExecuteActivity(actx, MarkFulfillingActivity, MarkInput{OrderID: st.OrderID}).Get(actx, nil); err != nil {
		return st, err
	}
	st.Status = StatusFulfilling

	// Read what arrived meanwhile, so that completing leaves no signal
	// unread.
	for {
		var ev destination.Envelope
		if !paid.ReceiveAsync(&ev) {
			break
		}
		receive(ev)
	}
	return st, nil
}

func seenOf(ev destination.Envelope) Seen {
	return Seen{EventID: ev.EventID, EventType: ev.EventType, AggregateVersion: ev.AggregateVersion}
}
