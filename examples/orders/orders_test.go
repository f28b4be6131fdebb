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
	_, err := db.Pool.Exec(ctx, `CREATE TABLE orders (id uuid PRIMARY KEY, customer text NOT NULL, total_cents bigint NOT NULL CHECK (total_cents > 0), created_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
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
