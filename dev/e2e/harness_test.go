package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/broker"
	fdelivery "github.com/ferry-outbox/ferry/delivery"
	"github.com/ferry-outbox/ferry/delivery/rabbitmq"
	"github.com/ferry-outbox/ferry/destination"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/internal/telemetry"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

// env is one test's world: its own schema, exchange, queue, task queue and
// aggregate type (workflow IDs embed the aggregate type, so tests sharing
// the embedded server never signal each other's workflows).
type env struct {
	db        *ferrytest.DB
	br        *ferrytest.Broker
	taskQueue string
	aggType   string
	writer    *outbox.Writer
	// lane of the Ferry processes this env starts (FERRY_LANE); "": the
	// default, the workflow lane.
	lane string
}

// inLane makes the Ferry processes of e run lane.
func (e *env) inLane(lane string) *env {
	e.lane = lane
	return e
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupOn(t, ferrytest.NewDB(t, ""), ferrytest.NewBroker(t, ""))
}

// setupOn is setup on a schema and a broker of the caller's choice (a
// private PostgreSQL or RabbitMQ node that the test may stop).
func setupOn(t *testing.T, db *ferrytest.DB, br *ferrytest.Broker) *env {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE orders (id text PRIMARY KEY, note text NOT NULL)`)
	require.NoError(t, err)
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	return &env{
		db:        db,
		br:        br,
		taskQueue: ferrytest.Name("tq"),
		aggType:   ferrytest.Name("order"),
		writer:    w,
	}
}

type ferryOpts struct {
	amqpURL  string        // default: the test broker
	pollers  int           // default 1
	lease    time.Duration // default: the poller's
	pool     *pgxpool.Pool // default: the test schema's pool
	temporal client.Client // the pollers' client; default: the shared one
	// shared is the client of the worker and (unless temporal is set) the
	// pollers, as in one `ferry run` process: one-shot starts are eager.
	// Default: the shared test server's client.
	shared client.Client
	// The worker's workflow settings (worker.Config.Workflow); zero: the
	// defaults. idleTimeout is also the pollers' SignalWindow.
	idleTimeout  time.Duration
	startMode    string // poller.Config.StartMode; default one-shot
	maxHistory   int
	maxBlocked   int // zero: the default
	policies     map[string]workflows.EventPolicy
	publishBatch int               // zero: the default; -1: the regular path
	noWorker     bool              // pollers only
	noPoller     bool              // a worker only
	schedules    *worker.Schedules // the worker keeps these in place
	tracer       trace.TracerProvider
	metrics      *metrics.Metrics
	maint        *metrics.Maintenance
	// destinations route event types to workflows (Config.Destinations);
	// noBroker runs the worker without RabbitMQ.
	destinations []string
	noBroker     bool
	// dataConverter encodes destinations' envelopes (a codec's).
	dataConverter converter.DataConverter
	// lane of the pollers (poller.Config.Lane); default the workflow lane.
	// The publish-first lane's pollers publish with a publisher of their
	// own each, as `ferry poller --lane publish-first` does.
	lane string
	// maxMessageBytes of every publisher (broker.Config.MaxMessageBytes);
	// zero: the default.
	maxMessageBytes int
}

// startFerry runs pollers and a worker in this process until the test ends.
func (e *env) startFerry(t *testing.T, o ferryOpts) {
	t.Helper()
	ctx := context.Background()
	if o.amqpURL == "" && !o.noBroker {
		o.amqpURL = e.br.URL
	}
	if o.pool == nil {
		o.pool = e.db.Pool
	}
	workerClient := tclient
	if o.shared != nil {
		workerClient = o.shared
		if o.temporal == nil {
			o.temporal = o.shared
		}
	}
	if o.tracer != nil {
		// As a Ferry process: Temporal's tracing interceptor on the client
		// the worker and the pollers use (sharing the connection).
		ti, err := telemetry.TemporalInterceptor(o.tracer)
		require.NoError(t, err)
		traced, err := client.NewClientFromExisting(tclient, client.Options{Namespace: namespace, Logger: ferrytest.QuietLogger(),
			Interceptors: []interceptor.ClientInterceptor{ti}})
		require.NoError(t, err)
		t.Cleanup(traced.Close)
		workerClient = traced
		if o.temporal == nil {
			o.temporal = traced
		}
	}
	if o.temporal == nil {
		o.temporal = tclient
	}
	var brokerTarget fdelivery.Target
	if !o.noBroker {
		pub, err := broker.New(broker.Config{URL: o.amqpURL, Exchange: e.br.Exchange, DialTimeout: 2 * time.Second, MaxMessageBytes: o.maxMessageBytes})
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		brokerTarget, err = rabbitmq.New(rabbitmq.Config{Publisher: pub, TracerProvider: o.tracer})
		require.NoError(t, err)
	}
	dests, err := destination.ParseAll(o.destinations)
	require.NoError(t, err)
	router, err := destination.NewRouter(dests)
	require.NoError(t, err)
	acts, err := activities.New(activities.Config{Pool: o.pool, Broker: brokerTarget, Destinations: router, Namespace: namespace,
		DataConverter: o.dataConverter,
		Metrics:       o.metrics, MaintenanceMetrics: o.maint, Temporal: workerClient, TracerProvider: o.tracer})
	require.NoError(t, err)
	if !o.noWorker {
		w, err := worker.New(worker.Config{Temporal: workerClient, Activities: acts, TaskQueue: e.taskQueue, Schedules: o.schedules,
			Workflow: workflows.Settings{IdleTimeout: o.idleTimeout, MaxHistoryEvents: o.maxHistory, MaxBlockedRefs: o.maxBlocked,
				Policies: o.policies, PublishBatchSize: o.publishBatch}})
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(w.Stop)
	}
	for i := range max(o.pollers, 1) {
		if o.noPoller {
			break
		}
		var target fdelivery.Target
		var needs func(string, string) bool
		if o.lane == poller.LanePublishFirst {
			lease := cmp.Or(o.lease, 30*time.Second)
			lp, err := broker.New(broker.Config{URL: o.amqpURL, Exchange: e.br.Exchange, DialTimeout: 2 * time.Second, MaxMessageBytes: o.maxMessageBytes,
				Heartbeat: poller.LaneHeartbeat(lease)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = lp.Close() })
			target, err = rabbitmq.New(rabbitmq.Config{Publisher: lp, TracerProvider: o.tracer})
			require.NoError(t, err)
			needs = func(aggType, eventType string) bool {
				routes, _ := router.For(aggType, eventType)
				return len(routes) > 0
			}
		}
		p, err := poller.New(poller.Config{
			Pool:           o.pool,
			Temporal:       o.temporal,
			TaskQueue:      e.taskQueue,
			Name:           fmt.Sprintf("poller-%d", i),
			PollInterval:   200 * time.Millisecond,
			Lease:          o.lease,
			SignalWindow:   o.idleTimeout,
			StartMode:      o.startMode,
			Lane:           o.lane,
			Target:         target,
			NeedsWorkflow:  needs,
			Metrics:        o.metrics.Relay(),
			Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
			TracerProvider: o.tracer,
		})
		require.NoError(t, err)
		require.NoError(t, p.Start(ctx))
		t.Cleanup(p.Stop)
	}
}

// commit writes one business row and its event in one transaction and
// commits (or rolls back). It returns the event id.
func (e *env) commit(ctx context.Context, aggID string, rollback bool) (string, error) {
	return e.commitType(ctx, aggID, "changed", rollback)
}

// commitType is commit with an event type of the caller's choice.
func (e *env) commitType(ctx context.Context, aggID, eventType string, rollback bool) (string, error) {
	id := uuid.Must(uuid.NewV7())
	tx, err := e.db.Pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, note) VALUES ($1, $2)`, id.String(), aggID); err != nil {
		return "", err
	}
	payload, _ := json.Marshal(map[string]string{"order": id.String()})
	if _, err := e.writer.Write(ctx, tx, outbox.Event{ID: id, AggregateType: e.aggType, AggregateID: aggID, EventType: eventType, Payload: payload}); err != nil {
		return "", err
	}
	if rollback {
		return id.String(), tx.Rollback(ctx)
	}
	return id.String(), tx.Commit(ctx)
}

// delivery is one message as a consumer saw it.
type delivery struct {
	id      string
	aggID   string
	version int64
	at      time.Time // when the tap received it (zero elsewhere)
}

func parse(t *testing.T, d amqp.Delivery) delivery {
	t.Helper()
	v, ok := d.Headers[broker.HeaderAggregateVersion].(int64)
	require.True(t, ok, "header %s missing or not int64: %#v", broker.HeaderAggregateVersion, d.Headers)
	aggID, _ := d.Headers[broker.HeaderAggregateID].(string)
	return delivery{id: d.MessageId, aggID: aggID, version: v}
}

// ledger accounts for deliveries the way a consumer with an inbox would:
// first sight of a message id counts, later ones are duplicates.
type ledger struct {
	mu         sync.Mutex
	seen       map[string]bool
	order      map[string][]int64 // per aggregate, versions in first-delivery order
	duplicates int
	all        []delivery // every copy, in arrival order (the checker's view)
}

func newLedger() *ledger { return &ledger{seen: map[string]bool{}, order: map[string][]int64{}} }

func (l *ledger) add(d delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, d)
	if l.seen[d.id] {
		l.duplicates++
		return
	}
	l.seen[d.id] = true
	l.order[d.aggID] = append(l.order[d.aggID], d.version)
}

func (l *ledger) unique() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// requireInOrder checks that every aggregate's first deliveries came as
// versions 1, 2, 3… with none missing.
func (l *ledger) requireInOrder(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for agg, versions := range l.order {
		for i, v := range versions {
			require.Equal(t, int64(i+1), v, "aggregate %s: delivery %d has version %d (all: %v)", agg, i, v, versions)
		}
	}
}

// consume reads the test queue into a new ledger, on a connection of its
// own, until stop is called or the test ends. When the broker goes away (a
// test restarting its own node), it consumes again once the broker is back;
// a copy the broker redelivers then (read, not yet acknowledged, when the
// connection broke) is the same copy again and is not counted twice.
func (e *env) consume(t *testing.T) (l *ledger, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, deliveries, err := e.tapSession(ctx)
	require.NoError(t, err)
	l = newLedger()
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			for d := range deliveries {
				v, _ := d.Headers[broker.HeaderAggregateVersion].(int64)
				aggID, _ := d.Headers[broker.HeaderAggregateID].(string)
				l.mu.Lock()
				again := d.Redelivered && l.seen[d.MessageId]
				l.mu.Unlock()
				if !again {
					l.add(delivery{id: d.MessageId, aggID: aggID, version: v, at: time.Now()})
				}
				_ = d.Ack(false)
			}
			_ = conn.Close()
			for ctx.Err() == nil {
				if conn, deliveries, err = e.tapSession(ctx); err == nil {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
			if ctx.Err() != nil {
				return
			}
		}
	})
	stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(stop)
	return l, stop
}

// tapSession opens a connection and a consumer on the test queue; the
// deliveries end when ctx does or the connection breaks.
func (e *env) tapSession(ctx context.Context) (*amqp.Connection, <-chan amqp.Delivery, error) {
	conn, err := amqp.Dial(e.br.URL)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(500, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.ConsumeWithContext(ctx, e.br.Queue, "", false, false, false, false, nil)
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, deliveries, nil
}

// commitN commits n events (each with its business row) spread round-robin
// over the aggregates agg-0 … agg-(aggregates-1), and returns their ids.
func (e *env) commitN(t *testing.T, n, aggregates int) map[string]bool {
	t.Helper()
	ids := make(map[string]bool, n)
	for i := range n {
		id, err := e.commit(context.Background(), aggID(i%aggregates), false)
		require.NoError(t, err)
		ids[id] = true
	}
	return ids
}

// warmUp sends one event through and waits until it is confirmed and
// marked, proving the path works before a test breaks it. (The message can
// reach the queue before its confirm reaches Ferry; an outage in between is
// a legitimate at-least-once duplicate, not what outage tests are about.)
func (e *env) warmUp(t *testing.T) {
	t.Helper()
	id, err := e.commit(context.Background(), "warm", false)
	require.NoError(t, err)
	msgs := e.br.Collect(t, 1, 60*time.Second)
	require.Len(t, msgs, 1)
	require.Equal(t, id, msgs[0].MessageId)
	waitFor(t, 10*time.Second, "the warm-up marked published", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'published'`, id) == 1
	})
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// child is a process of its own: `ferry <sub>`, or the checker's consumer.
type child struct {
	cmd  *exec.Cmd
	out  *ferrytest.Buffer
	done chan struct{} // closed once the process has exited
	err  error         // Wait's result; read it after done
}

func (e *env) startChild(t *testing.T) *child {
	t.Helper()
	return e.startProcess(t, "run")
}

// startProcess runs `ferry <sub>` in a process of its own against the test's
// schema, broker and task queue until the test ends. extraEnv overrides. Its
// PostgreSQL sessions carry application_name "<schema>/<sub>", so a test
// can find (and terminate) them.
func (e *env) startProcess(t *testing.T, sub string, extraEnv ...string) *child {
	t.Helper()
	return e.spawn(t, []string{sub}, append([]string{childEnv + "=1"}, extraEnv...)...)
}

// spawn re-executes the test binary with args and the test's Ferry
// settings; env (childEnv decides what the child runs) overrides them.
func (e *env) spawn(t *testing.T, args []string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	out := &ferrytest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if e.lane != "" {
		env = append([]string{"FERRY_LANE=" + e.lane}, env...)
	}
	cmd.Env = append(append(os.Environ(),
		"FERRY_POSTGRES_URL="+withParam(e.db.URL, "application_name", e.db.Schema+"/"+args[0]),
		"FERRY_AMQP_URL="+e.br.URL,
		"FERRY_TEMPORAL_ADDRESS="+temporalAddr,
		"FERRY_TEMPORAL_NAMESPACE="+namespace,
		"FERRY_TASK_QUEUE="+e.taskQueue,
		"FERRY_EXCHANGE="+e.br.Exchange,
		"FERRY_POLL_INTERVAL=200ms",
		"FERRY_LEASE=12s",
		"FERRY_LOG_LEVEL=warn",
	), env...)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, out: out, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("output of %v (pid %d):\n%s", args, cmd.Process.Pid, out.String())
		}
	})
	return c
}

// kill SIGKILLs the process (if it still runs) and waits until it is gone.
func (c *child) kill() {
	if !c.exited() {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-c.done
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, as a supervisor stopping the process does, and waits
// up to a minute for a clean exit.
func (c *child) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	c.waitExit(t, time.Minute)
	require.NoError(t, c.err, "a clean exit after SIGTERM; output:\n%s", c.out.String())
}

// waitExit waits up to timeout for the process to end on its own.
func (c *child) waitExit(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(timeout):
		t.Fatalf("process %d still runs after %s; output:\n%s", c.cmd.Process.Pid, timeout, c.out.String())
	}
}

// withParam returns rawURL with the query parameter key set to value.
func withParam(rawURL, key, value string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("e2e: bad URL: %v", err))
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

func aggID(i int) string { return "agg-" + strconv.Itoa(i) }

// longestGap is the longest time between two deliveries the tap received.
func (l *ledger) longestGap() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(l.all); i++ {
		gap = max(gap, l.all[i].at.Sub(l.all[i-1].at))
	}
	return gap
}
