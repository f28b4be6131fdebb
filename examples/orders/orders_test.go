package orders_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/examples/orders"
	"github.com/ferry-outbox/ferry/internal/testenv"
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
	db := testenv.Postgres(t)
	ctx := context.Background()
	require.NoError(t, orders.Migrate(ctx, db.Pool))
	svc, err := orders.NewService(db.Pool)
	require.NoError(t, err)
	count := func(table string) (n int) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
		return n
	}

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
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		svc.ServeHTTP(rec, httptest.NewRequest(tt.method, "/orders", strings.NewReader(tt.body)))
		require.Equal(t, tt.wantStatus, rec.Code, "%s: %s", tt.name, rec.Body)
		require.Contains(t, rec.Body.String(), tt.wantBody, tt.name)
	}
	// Only the valid request wrote anything, and it wrote both rows.
	require.Equal(t, 1, count("orders"))
	require.Equal(t, 1, count("outbox_events"))
	require.Equal(t, 1, count(`orders o JOIN outbox_events e ON e.aggregate_id = o.id::text AND e.aggregate_type = 'order' AND e.event_type = 'created'`))
}

// POST /orders/{id}/pay: the order's status and its order.paid event in
// one transaction, once per order.
func TestPay(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
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
	var events []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, created.OrderID).Scan(&status))
	require.Equal(t, "paid", status)
	rows, err := db.Pool.Query(ctx, `SELECT event_type || ' v' || aggregate_version FROM outbox_events WHERE aggregate_id = $1 ORDER BY aggregate_version`, created.OrderID)
	require.NoError(t, err)
	for rows.Next() {
		var ev string
		require.NoError(t, rows.Scan(&ev))
		events = append(events, ev)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"created v1", "paid v2"}, events, "one order.paid, after order.created")
}
