package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.uber.org/fx"

	ferryoutbox "github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/examples/orders"
	"github.com/ferry-outbox/ferry/examples/orders/fulfilment"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/workflows"
)

// The example service as its README walks it: POST /orders, then the
// order.created message on RabbitMQ and the aggregate's workflow in
// Temporal, with the poller and worker embedded in the service.
func TestOrdersExampleEndToEnd(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	br := ferrytest.NewBroker(t, "")
	ctx := context.Background()

	var srv *orders.Server
	app := fx.New(fx.NopLogger, fx.Populate(&srv), orders.Options(orders.Config{
		HTTPAddress: "127.0.0.1:0",
		Ferry: ferryoutbox.Config{
			AMQPURL:      br.URL,
			Namespace:    namespace,
			TaskQueue:    ferrytest.Name("tq"),
			Exchange:     br.Exchange,
			PollInterval: 200 * time.Millisecond,
		},
		Postgres:   ferryoutbox.PostgresConfig{URL: db.URL},
		Temporal:   ferryoutbox.TemporalConfig{Address: temporalAddr, Namespace: namespace},
		Fulfilment: fulfilment.Config{TaskQueue: ferrytest.Name("fulfilment")},
	}))
	require.NoError(t, app.Err())
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { require.NoError(t, app.Stop(context.Background())) })

	postTo := func(path, body string) (int, string) {
		resp, err := http.Post("http://"+srv.Addr()+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	post := func(body string) (int, string) { return postTo("/orders", body) }

	// A refused request writes nothing, so it can never be published.
	code, body := post(`{"customer": "", "total_cents": 4200}`)
	require.Equal(t, http.StatusBadRequest, code, body)

	code, body = post(`{"customer": "ada", "total_cents": 4200}`)
	require.Equal(t, http.StatusCreated, code, body)
	var created orders.Created
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	require.Equal(t, workflows.WorkflowID("order", created.OrderID), created.WorkflowID)

	d, ok := br.Get(t, 30*time.Second)
	require.True(t, ok, "order.created reached RabbitMQ")
	require.Equal(t, "order.created", d.RoutingKey)
	require.Equal(t, created.EventID, d.MessageId)
	require.Equal(t, "created", d.Type)
	require.Equal(t, created.OrderID, d.Headers[broker.HeaderAggregateID])
	require.Equal(t, int64(1), d.Headers[broker.HeaderAggregateVersion])
	var ev orders.OrderCreated
	require.NoError(t, json.Unmarshal(d.Body, &ev))
	require.Equal(t, orders.OrderCreated{OrderID: created.OrderID, Customer: "ada", TotalCents: 4200}, ev)

	desc, err := tclient.DescribeWorkflowExecution(ctx, created.WorkflowID, "")
	require.NoError(t, err, "the aggregate's workflow is in Temporal under %s", created.WorkflowID)
	require.Equal(t, workflows.AggregateWorkflowName, desc.WorkflowExecutionInfo.Type.Name)
	require.Contains(t, []enumspb.WorkflowExecutionStatus{
		enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
	}, desc.WorkflowExecutionInfo.Status)

	_, extra := br.Get(t, 500*time.Millisecond)
	require.False(t, extra, "only the accepted order produced a message")

	// The payment: order.paid on RabbitMQ, and the order's Fulfilment
	// workflow (started by order.created) signalled with it.
	code, body = postTo("/orders/"+created.OrderID+"/pay", "")
	require.Equal(t, http.StatusOK, code, body)
	var paid orders.Paid
	require.NoError(t, json.Unmarshal([]byte(body), &paid))
	require.Equal(t, created.FulfilmentID, paid.FulfilmentID)
	d, ok = br.Get(t, 30*time.Second)
	require.True(t, ok, "order.paid reached RabbitMQ")
	require.Equal(t, "order.paid", d.RoutingKey)
	require.Equal(t, paid.EventID, d.MessageId)
	waitFor(t, time.Minute, "the fulfilment to mark the order fulfilling", func() bool {
		v, err := tclient.QueryWorkflow(ctx, created.FulfilmentID, "", fulfilment.QueryState)
		if err != nil {
			return false
		}
		var st fulfilment.State
		require.NoError(t, v.Get(&st))
		return st.Status == fulfilment.StatusFulfilling
	})
	code, body = postTo("/orders/"+created.OrderID+"/pay", "")
	require.Equal(t, http.StatusConflict, code, body)

	// The service's /metrics carries Ferry's series beside its own.
	waitFor(t, 10*time.Second, "both publishes on the service's /metrics", func() bool {
		return strings.Contains(scrape(t, "http://"+srv.Addr()+"/metrics"), `ferry_published_total{aggregate_type="order"} 2`)
	})
	m := scrape(t, "http://"+srv.Addr()+"/metrics")
	require.Contains(t, m, `ferry_destination_deliveries_total{destination="fulfilment",outcome="delivered"} 2`, "the start and the signal")
	require.Contains(t, m, "ferry_outbox_table_bytes ")
	require.Contains(t, m, "go_goroutines ", "the service's own runtime metrics")
}

// ferry.New, for services without fx: the same relay over the service's
// own pool and Temporal client.
func TestEmbeddedRelayWithoutFx(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r, err := ferryoutbox.New(ferryoutbox.Config{TaskQueue: e.taskQueue, AMQPURL: e.br.URL, Exchange: e.br.Exchange, PollInterval: 200 * time.Millisecond},
		ferryoutbox.Deps{Pool: e.db.Pool, Temporal: tclient}, ferryoutbox.Roles{Poller: true, Worker: true})
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)

	l, stop := e.consume(t)
	ids := e.commitN(t, 40, 4)
	waitFor(t, time.Minute, "every event delivered", func() bool { return l.unique() == len(ids) })
	stop()
	l.requireInOrder(t)
	r.Stop()
	r.Stop()
}
