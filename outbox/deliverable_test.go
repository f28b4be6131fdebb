package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/ferry-outbox/ferry/internal/testenv"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// printableASCII is every byte Temporal takes in a workflow ID.
func printableASCII() string {
	var b strings.Builder
	for c := byte(0x20); c <= 0x7e; c++ {
		b.WriteByte(c)
	}
	return b.String()
}

// Validate's rule for AggregateID is the Temporal client's own: for every
// byte value, an id with it is refused by Validate exactly when the SDK
// refuses the workflow ID before sending anything (gRPC checks the
// temporal-resource-id header). If an SDK or gRPC upgrade changes the rule,
// this fails.
func TestAggregateIDRuleIsTheTemporalClients(t *testing.T) {
	t.Parallel()
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	// A frontend that answers the client's first call and nothing else:
	// every signal the client lets through comes back Unimplemented at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	workflowservice.RegisterWorkflowServiceServer(srv, systemInfoOnly{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	// raw keeps the error gRPC itself gave each signal, by workflow ID:
	// the SDK retries a refused header until the deadline and then reports
	// only that.
	var raw sync.Map
	var cancels sync.Map // workflow ID -> the CancelFunc of its call
	record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := req.(*workflowservice.SignalWithStartWorkflowExecutionRequest); ok {
			raw.Store(r.GetWorkflowId(), err)
			// A refused header is final: end the call now instead of
			// letting the SDK retry it until the deadline, so the
			// deadline can be generous for a loaded machine.
			if err != nil && strings.Contains(err.Error(), "non-printable ASCII characters") {
				if stop, ok := cancels.Load(r.GetWorkflowId()); ok {
					stop.(context.CancelFunc)()
				}
			}
		}
		return err
	}
	c, err := client.NewLazyClient(client.Options{HostPort: ln.Addr().String(), Logger: testenv.QuietLogger(),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(record)}}})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	// refusedByClient reports whether the SDK refused the workflow ID
	// before sending it (false: the frontend got it), or why neither.
	refusedByClient := func(aggID string) (bool, error) {
		id := workflows.WorkflowID("order", aggID)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cancels.Store(id, cancel)
		defer cancels.Delete(id)
		_, err := c.SignalWithStartWorkflow(ctx, id, workflows.EventsSignal, nil,
			client.StartWorkflowOptions{TaskQueue: "ferry"}, workflows.AggregateWorkflowName)
		if errors.As(err, new(*serviceerror.Unimplemented)) {
			return false, nil
		}
		got, _ := raw.Load(id)
		if rawErr, _ := got.(error); rawErr != nil && strings.Contains(rawErr.Error(), "non-printable ASCII characters") {
			return true, nil
		}
		return false, fmt.Errorf("neither reached the frontend nor was refused for its header: %v", err)
	}
	_, err = refusedByClient("warm-up") // the client's first call also asks for the server's capabilities
	require.NoError(t, err)

	type verdict struct {
		validate, temporal bool
		err                error
	}
	verdicts := make([]verdict, 256)
	var wg sync.WaitGroup
	for i := 1; i < len(verdicts); i++ { // NUL: PostgreSQL text cannot hold it, and Validate refuses it (TestValidate)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := event("order", "o-"+string([]byte{byte(i)})+"-1")
			refused, err := refusedByClient(ev.AggregateID)
			verdicts[i] = verdict{validate: w.Validate(ev) != nil, temporal: refused, err: err}
		}()
	}
	wg.Wait()
	accepted := 0
	for i, v := range verdicts[1:] {
		require.NoError(t, v.err, "byte 0x%02x", i+1)
		require.Equal(t, v.temporal, v.validate, "byte 0x%02x: the Temporal client refuses it: %v, Validate refuses it: %v", i+1, v.temporal, v.validate)
		if !v.validate {
			accepted++
		}
	}
	require.Equal(t, 0x7e-0x20+1, accepted, "printable ASCII only")
}

type systemInfoOnly struct {
	workflowservice.UnimplementedWorkflowServiceServer
}

func (systemInfoOnly) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

// When the schema refuses a row that Validate let through (a schema newer
// and stricter than this binary), the Writer still returns ErrInvalidEvent
// naming the field, keeps the PostgreSQL error reachable and leaves the
// row, payload included, out of the message.
func TestSchemaCheckViolationIsInvalidEvent(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := context.Background()
	// A stricter rule under the name of migration 0007's constraint.
	_, err := db.Pool.Exec(ctx, `
		ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_aggregate_id_printable;
		ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_aggregate_id_printable CHECK (aggregate_id NOT LIKE '%!%')`)
	require.NoError(t, err)

	ev := event("order", "o!1")
	ev.Payload = []byte(`{"secret": "s3cr3t"}`)
	require.NoError(t, w.Validate(ev))
	tx := begin(t, db)
	_, err = w.Write(ctx, tx, ev)
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	require.ErrorContains(t, err, "AggregateID refused by the schema (outbox_events_aggregate_id_printable)")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23514", pgErr.Code)
	require.NotContains(t, err.Error(), "s3cr3t", "the failing row's detail stays out of the message")
	require.NoError(t, tx.Rollback(ctx))

	n, err := pgx.CollectExactlyOneRow(query(t, db, `SELECT count(*) FROM outbox_events`), pgx.RowTo[int64])
	require.NoError(t, err)
	require.Zero(t, n)
}

func query(t *testing.T, db *testenv.DB, sql string) pgx.Rows {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), sql)
	require.NoError(t, err)
	return rows
}
