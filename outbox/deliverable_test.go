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
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/ferry-outbox/ferry/ferrytest"
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

// Why aggregate ids are escaped, and that the escape is enough: for every
// byte value and a set of characters outside ASCII, the Temporal client
// refuses the workflow ID "ferry/order/<id>" before sending anything (gRPC
// checks the temporal-resource-id header) exactly when the id has a byte
// outside printable ASCII, and never refuses workflows.WorkflowID's ID,
// which reaches the frontend whatever the id. Validate refuses exactly the
// ids no encoding saves: invalid UTF-8 and control characters. If an SDK or
// gRPC upgrade changes the header's rule, this fails.
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
	c, err := client.NewLazyClient(client.Options{HostPort: ln.Addr().String(), Logger: ferrytest.QuietLogger(),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(record)}}})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	// refusedByClient reports whether the SDK refused the workflow ID
	// before sending it (false: the frontend got it), or why neither.
	refusedByClient := func(id string) (bool, error) {
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

	// Every byte but NUL (PostgreSQL text cannot hold it, and Validate
	// refuses it: TestValidate) alone, so 0x80-0xFF are invalid UTF-8; and
	// characters of 2, 3 and 4 bytes, C1 controls and the edges around them.
	var ids []string
	for b := 1; b < 256; b++ {
		ids = append(ids, "o-"+string([]byte{byte(b)})+"-1")
	}
	for _, r := range []rune{0x80, 0x85, 0x9f, 0xa0, 0xad, 0xfc, 0x7ff, 0x800, 0x200b, 0x202e, 0x2028, 0x3000, 0x88fd,
		0xfeff, 0xfffd, 0xffff, 0x10000, 0x1f3ab, 0xe0001, 0x10fffd} {
		ids = append(ids, "o-"+string(r)+"-1")
	}
	ids = append(ids, "m~C3~BCller", strings.Repeat("🎫", 50), "\xed\xa0\x80") // an escape spelled out; 200 bytes; a surrogate

	type verdict struct {
		validate, plain, escaped bool // refused by Validate; by the client, as it is and escaped
		err                      error
	}
	verdicts := make([]verdict, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			v := verdict{validate: w.Validate(event("order", id)) != nil}
			if v.plain, v.err = refusedByClient("ferry/order/" + id); v.err == nil {
				v.escaped, v.err = refusedByClient(workflows.WorkflowID("order", id))
			}
			verdicts[i] = v
		})
	}
	wg.Wait()
	accepted := 0
	for i, v := range verdicts {
		id := ids[i]
		require.NoError(t, v.err, "%q", id)
		require.False(t, v.escaped, "%q: the client refuses its workflow ID %q", id, workflows.WorkflowID("order", id))
		require.Equal(t, !plainASCII(id), v.plain, "%q: the client refuses it as it is: %v", id, v.plain)
		wantRefused := !utf8.ValidString(id) || strings.ContainsFunc(id, unicode.IsControl)
		require.Equal(t, wantRefused, v.validate, "%q: Validate refuses it: %v", id, v.validate)
		if !v.validate {
			accepted++
		}
	}
	// Printable ASCII (0x20-0x7E), every character above but the three C1
	// controls, and the three extra ids but the surrogate.
	require.Equal(t, 0x7e-0x20+1+20-3+2, accepted)
}

func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
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

func query(t *testing.T, db *ferrytest.DB, sql string) pgx.Rows {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), sql)
	require.NoError(t, err)
	return rows
}
