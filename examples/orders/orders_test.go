package orders_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/examples/orders"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/relaytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestOptionsGraph(t *testing.T) {
	t.Parallel()
	var srv *orders.Server
	require.NoError(t, fx.ValidateApp(orders.Options(orders.Config{}), fx.Populate(&srv), fx.NopLogger))
}

func TestHandler(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	require.NoError(t, orders.Migrate(ctx, db.Pool))
	svc, err := orders.NewService(db.Pool)
	require.NoError(t, err)

	tests := []struct {
		name, method, body string
		wantStatus         int
		wantBody           string
	}{
		{"created", http.MethodPost, `{"customer": "ada", "total_cents": 4200}`, http.StatusCreated, `"workflow_id":"ferry/order/`},
		{"no customer", http.MethodPost, `{"customer": " ", "total_cents": 4200}`, http.StatusBadRequest, "customer"},
		{"zero total", http.MethodPost, `{"customer": "ada", "total_cents": 0}`, http.StatusBadRequest, "total_cents"},
		{"unknown field", http.MethodPost, `{"customer": "ada", "total_cents": 1, "x": 1}`, http.StatusBadRequest, "body must be JSON"},
		{"not JSON", http.MethodPost, `ada`, http.StatusBadRequest, "body must be JSON"},
		{"GET", http.MethodGet, ``, http.StatusMethodNotAllowed, "use POST"},
	}
	var created orders.Created
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		svc.ServeHTTP(rec, httptest.NewRequest(tt.method, "/orders", strings.NewReader(tt.body)))
		require.Equal(t, tt.wantStatus, rec.Code, "%s: %s", tt.name, rec.Body)
		require.Contains(t, rec.Body.String(), tt.wantBody, tt.name)
		if rec.Code == http.StatusCreated {
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &created))
		}
	}
	// Only the valid request's transaction wrote anything: its order row
	// and its order.created event, with the order in the payload.
	ev := ferrytest.RequireManyWritten(ctx, t, db.Pool, []ferrytest.Expected{{
		AggregateType: orders.AggregateType, AggregateID: created.OrderID, EventType: "created", Version: 1,
		Payload: orders.OrderCreated{OrderID: created.OrderID, Customer: "ada", TotalCents: 4200},
	}})
	require.Equal(t, created.EventID, ev[0].ID.String())
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = $1`, created.OrderID).Scan(&n))
	require.Equal(t, 1, n, "the order row committed with its event")
}

// POST /orders/{id}/pay: the order's status and its order.paid event in
// one transaction, once per order.
func TestPay(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	require.NoError(t, orders.Migrate(ctx, db.Pool))
	svc, err := orders.NewService(db.Pool)
	require.NoError(t, err)
	created, err := svc.Create(ctx, orders.NewOrder{Customer: "ada", TotalCents: 4200})
	require.NoError(t, err)
	require.Equal(t, "fulfilment-"+created.OrderID, created.FulfilmentID)

	pay := "/orders/" + created.OrderID + "/pay"
	tests := []struct {
		name, method, path string
		wantStatus         int
		wantBody           string
	}{
		{"GET", http.MethodGet, pay, http.StatusMethodNotAllowed, "use POST"},
		{"not an id", http.MethodPost, "/orders/ada/pay", http.StatusNotFound, "not an order id"},
		{"unknown order", http.MethodPost, "/orders/01a22c2b-3108-7000-8000-000000000000/pay", http.StatusNotFound, "no such order"},
		{"paid", http.MethodPost, pay, http.StatusOK, `"fulfilment_id":"fulfilment-` + created.OrderID + `"`},
		{"paid twice", http.MethodPost, pay, http.StatusConflict, "already paid"},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		svc.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		require.Equal(t, tt.wantStatus, rec.Code, "%s: %s", tt.name, rec.Body)
		require.Contains(t, rec.Body.String(), tt.wantBody, tt.name)
	}

	var status string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, created.OrderID).Scan(&status))
	require.Equal(t, "paid", status)
	// One order.paid, after order.created, with the order's total.
	ferrytest.RequireManyWritten(ctx, t, db.Pool, []ferrytest.Expected{
		{AggregateType: orders.AggregateType, AggregateID: created.OrderID, EventType: "created", Version: 1},
		{AggregateType: orders.AggregateType, AggregateID: created.OrderID, EventType: "paid", Version: 2,
			Payload: orders.OrderPaid{OrderID: created.OrderID, TotalCents: 4200}},
	})
}

// Ferry's relay, run in the test's process against the test's PostgreSQL
// and RabbitMQ, publishes the order.created a handler committed. It runs
// the publish-first lane (its poller publishes to RabbitMQ itself, and
// would call Temporal only to hand a failing aggregate to its workflow),
// so this module's tests need no Temporal server, which it cannot link:
// the client is one that fails every call, and the fulfilment routes are
// not configured here (a route would need the workflow).
func TestRelayPublishesTheOrder(t *testing.T) {
	t.Parallel()
	db, br := ferrytest.NewDB(t, ""), ferrytest.NewBroker(t, "")
	ctx := context.Background()
	require.NoError(t, orders.Migrate(ctx, db.Pool))
	relaytest.Start(t, relaytest.Config{DB: db, Broker: br, Temporal: ferrytest.UnreachableTemporal(t),
		Config: ferry.Config{Lane: ferry.LanePublishFirst}, Roles: ferry.Roles{Poller: true}})
	svc, err := orders.NewService(db.Pool)
	require.NoError(t, err)

	created, err := svc.Create(ctx, orders.NewOrder{Customer: "ada", TotalCents: 4200})
	require.NoError(t, err)
	ferrytest.WaitPublished(t, db.Pool, 30*time.Second, uuid.MustParse(created.EventID))

	msg, ok := br.Get(t, 10*time.Second)
	require.True(t, ok, "the message is on the test's queue")
	require.Equal(t, created.EventID, msg.MessageId, "the event id is the message id consumers deduplicate by")
	require.Equal(t, "order.created", msg.RoutingKey)
	var body orders.OrderCreated
	require.NoError(t, json.Unmarshal(msg.Body, &body))
	require.Equal(t, orders.OrderCreated{OrderID: created.OrderID, Customer: "ada", TotalCents: 4200}, body)
}
