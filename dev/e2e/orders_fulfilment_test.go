package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/examples/orders"
	"github.com/ferry-outbox/ferry/examples/orders/fulfilment"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/internal/failpoint"
)

// ordersServiceMain is the orders example service (as cmd/orders runs it:
// Ferry's poller and worker and the fulfilment worker in one process) in a
// child process, configured from the FERRY_* variables spawn sets and
// ORDERS_FULFILMENT_TASK_QUEUE. It runs until SIGTERM, or until a failpoint
// SIGKILLs it.
func ordersServiceMain() int {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := orders.ConfigFromEnv()
	cfg.HTTPAddress = "127.0.0.1:0"
	cfg.Ferry.PollInterval = 200 * time.Millisecond
	cfg.Ferry.Lease = 12 * time.Second
	app := fx.New(fx.NopLogger, orders.Options(cfg))
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		fmt.Fprintf(os.Stderr, "orders: %v\n", err)
		return 1
	}
	fmt.Println("orders: started")
	<-ctx.Done()
	// Detached: ctx is cancelled, and stopping needs time of its own.
	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelStop()
	if err := app.Stop(stopCtx); err != nil {
		fmt.Fprintf(os.Stderr, "orders: stop: %v\n", err)
		return 1
	}
	return 0
}

// The orders example's Fulfilment workflow, through real Temporal, when
// the service (Ferry's worker embedded) is not running at the commit, or is
// SIGKILLed between the commit and the start, or between the start (and
// the signal) and the outbox rows' mark. Each case commits an order and its
// payment, then lets a fresh service process take over. Whatever the
// crash, the order's fulfilment is started once (one run of
// fulfilment-<order id>, started by the order.created event), gets paid
// once and after created (one signal in its history, its query in version
// order), the order ends fulfilling, and both outbox rows are published.
func TestOrdersFulfilmentSurvivesWorkerKill(t *testing.T) {
	t.Parallel()
	require.True(t, failpoint.Enabled, "failpoints need a build with -tags failpoints (make test sets it)")
	tests := []struct {
		name      string
		failpoint string // the first service process dies there; "": no first process
		// atCrash checks Temporal and PostgreSQL while no service runs.
		atCrash func(t *testing.T, o placedOrder)
		// redone: the crash came after the publish, so the restarted
		// worker published (and started, and signalled) again.
		redone bool
	}{
		{name: "no service at the commit"},
		{
			// The rows are claimed and leased, nothing reached Temporal:
			// the restarted poller claims them again once the lease (12s)
			// ends.
			name: "killed between the commit and the start", failpoint: "poller.after-claim=exit",
			atCrash: func(t *testing.T, o placedOrder) {
				_, err := tclient.DescribeWorkflowExecution(context.Background(), o.created.FulfilmentID, "")
				var notFound *serviceerror.NotFound
				require.ErrorAs(t, err, &notFound, "no fulfilment was started before the crash")
			},
		},
		{
			// RabbitMQ confirmed both events and Temporal took the start and
			// the signal; the rows are not marked. The restarted worker
			// sends all again: the start finds the run (a no-op), the
			// server drops the signal it has seen (same request id).
			name: "killed between the start and the mark", failpoint: "worker.after-confirm=exit",
			atCrash: func(t *testing.T, o placedOrder) {
				_, err := tclient.DescribeWorkflowExecution(context.Background(), o.created.FulfilmentID, "")
				require.NoError(t, err, "the fulfilment was started before the crash")
			},
			redone: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := ordersEnv(t)
			o := e.placeAndPay(t)
			if tt.failpoint != "" {
				victim := e.startOrders(t, "FERRY_FAILPOINTS="+tt.failpoint)
				victim.waitExit(t, 2*time.Minute)
				name, _, _ := strings.Cut(tt.failpoint, "=")
				require.Contains(t, victim.out.String(), "failpoint "+name+": killing process", "the service died at its failpoint")
				require.Zero(t, e.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'published'`), "nothing was marked published before the crash")
				tt.atCrash(t, o)
			}
			e.startOrders(t)
			copies := e.requireFulfilled(t, o)
			if tt.redone {
				require.Greater(t, copies, 2, "the restarted worker published the confirmed events again")
			}
		})
	}
}

// fulfilmentEnv is an env for the orders example: a schema with the
// example's tables, a broker, and task queues of its own (Ferry's and the
// fulfilment's).
type fulfilmentEnv struct {
	*env
	svc       *orders.Service
	fulfilTQ  string
	consumeMQ func(t *testing.T, timeout time.Duration) (string, bool)
}

func ordersEnv(t *testing.T) *fulfilmentEnv {
	t.Helper()
	db, br := ferrytest.NewDB(t, ""), ferrytest.NewBroker(t, "")
	require.NoError(t, orders.Migrate(context.Background(), db.Pool))
	svc, err := orders.NewService(db.Pool)
	require.NoError(t, err)
	return &fulfilmentEnv{
		env:      &env{db: db, br: br, taskQueue: ferrytest.Name("tq"), aggType: orders.AggregateType},
		svc:      svc,
		fulfilTQ: ferrytest.Name("fulfilment"),
		consumeMQ: func(t *testing.T, timeout time.Duration) (string, bool) {
			d, ok := br.Get(t, timeout)
			return d.MessageId, ok
		},
	}
}

// startOrders runs the example service in a process of its own.
func (e *fulfilmentEnv) startOrders(t *testing.T, extraEnv ...string) *child {
	t.Helper()
	return e.spawn(t, []string{"orders"}, append([]string{childEnv + "=orders", "ORDERS_FULFILMENT_TASK_QUEUE=" + e.fulfilTQ}, extraEnv...)...)
}

type placedOrder struct {
	created orders.Created
	paid    orders.Paid
}

// placeAndPay commits an order, then its payment, through the service's
// own methods (the HTTP handlers' code), with no Ferry running.
func (e *fulfilmentEnv) placeAndPay(t *testing.T) placedOrder {
	t.Helper()
	ctx := context.Background()
	created, err := e.svc.Create(ctx, orders.NewOrder{Customer: "ada", TotalCents: 4200})
	require.NoError(t, err)
	paid, err := e.svc.Pay(ctx, created.OrderID)
	require.NoError(t, err)
	return placedOrder{created: created, paid: paid}
}

// requireFulfilled waits for the order to be fulfilling and its rows
// published, then checks the fulfilment's one run: its start, its one
// signal, its query. It returns how many messages RabbitMQ had for the
// order's two events.
func (e *fulfilmentEnv) requireFulfilled(t *testing.T, o placedOrder) (copies int) {
	t.Helper()
	ctx := context.Background()
	id := o.created.FulfilmentID
	require.Equal(t, fulfilment.WorkflowID(o.created.OrderID), id)

	var st fulfilment.State
	waitFor(t, 2*time.Minute, "the fulfilment to mark the order fulfilling", func() bool {
		v, err := tclient.QueryWorkflow(ctx, id, "", fulfilment.QueryState)
		if err != nil {
			return false
		}
		require.NoError(t, v.Get(&st))
		return st.Status == fulfilment.StatusFulfilling
	})
	require.Equal(t, []fulfilment.Seen{
		{EventID: o.created.EventID, EventType: "created", AggregateVersion: 1},
		{EventID: o.paid.EventID, EventType: "paid", AggregateVersion: 2},
	}, st.Events, "created, then paid, each once")
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM orders WHERE id = $1 AND status = 'fulfilling'`, o.created.OrderID))
	waitFor(t, time.Minute, "both outbox rows published", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = $1 AND status = 'published'`, o.created.OrderID) == 2
	})

	// One run, and in its history one start by order.created and one
	// paid signal: repeats were dropped before they reached the run.
	var runs []string
	waitFor(t, 30*time.Second, "the fulfilment in Temporal's visibility", func() bool {
		resp, err := tclient.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, Query: fmt.Sprintf("WorkflowId = '%s'", id), PageSize: 100,
		})
		require.NoError(t, err)
		runs = runs[:0]
		for _, ex := range resp.Executions {
			runs = append(runs, ex.Execution.RunId)
		}
		return len(runs) > 0
	})
	require.Len(t, runs, 1, "one run of %s", id)
	var started []destination.Envelope
	signals := 0
	it := tclient.GetWorkflowHistory(ctx, id, runs[0], false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		switch ev.EventType {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			var env destination.Envelope
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().Input, &env))
			started = append(started, env)
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			require.Equal(t, fulfilment.SignalPaid, ev.GetWorkflowExecutionSignaledEventAttributes().SignalName)
			signals++
		}
	}
	require.Len(t, started, 1)
	require.Equal(t, o.created.EventID, started[0].EventID, "started by the order.created event")
	require.Equal(t, 1, signals, "one paid signal in the run's history")

	// RabbitMQ got both events too (after a crash after the confirm, twice).
	seen := map[string]int{}
	for {
		msgID, ok := e.consumeMQ(t, time.Second)
		if !ok {
			break
		}
		seen[msgID]++
		copies++
	}
	require.Positive(t, seen[o.created.EventID], "order.created reached RabbitMQ")
	require.Positive(t, seen[o.paid.EventID], "order.paid reached RabbitMQ")
	require.Len(t, seen, 2)
	t.Logf("fulfilment %s: %d run, %d signal, %d repeats dropped by Dedup, %d broker copies of 2 events", id, len(runs), signals, st.Repeats, copies)
	return copies
}
