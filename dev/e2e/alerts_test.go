package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"gopkg.in/yaml.v3"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/internal/sandbox/payprovider"
	"github.com/ferry-outbox/ferry/internal/sandbox/smtpsink"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// Ferry's alert rules (deploy/prometheus/ferry-alerts.yml), each evaluated by
// a real Prometheus (prometheus_test.go) that scrapes real Ferry processes
// while the test drives the fault the rule is written for: the alert must go
// pending (when it has a `for:`), then fire, and resolve once the fault is
// gone. The rules run in a copy whose numbers only are smaller (testRules):
// `for:`, thresholds, range and subquery durations and offsets; labels,
// functions and operators are the shipped ones, read from the shipped file.
// Afterwards every expression of the Grafana dashboard is evaluated on the
// same servers, and the labels of the promtool tests' series are compared
// with what was scraped.

// ruleRewrite is how the test copy of one rule differs from the shipped
// rule: its `for:`, and number tokens of its expression (old → new, every
// occurrence).
type ruleRewrite struct {
	For     string
	Numbers map[string]string
}

// rewrites are the test's numbers. Every rule of the shipped file is here
// or in unitTestOnly; an old number that no longer occurs in its rule fails
// the test, so a changed rule cannot silently escape its check.
var rewrites = map[string]ruleRewrite{
	"FerryBacklogOld":                      {For: "4s", Numbers: map[string]string{"300": "8"}},
	"FerryBacklogGrowing":                  {For: "4s", Numbers: map[string]string{"1000": "10", "10m": "20s", "1m": "2s"}},
	"FerryAggregateBlocked":                {For: "4s"},
	"FerryQuarantineSpike":                 {Numbers: map[string]string{"15m": "20s"}},
	"FerryPublishFailing":                  {For: "8s", Numbers: map[string]string{"5m": "20s"}},
	"FerrySignalsFailing":                  {For: "8s", Numbers: map[string]string{"5m": "20s"}},
	"FerryLatencyHigh":                     {For: "4s", Numbers: map[string]string{"10m": "30s"}},
	"FerryOutboxUnreadable":                {For: "4s"},
	"FerryDriftFound":                      {Numbers: map[string]string{"30m": "30s"}},
	"FerryConsumerLagHigh":                 {For: "4s", Numbers: map[string]string{"10m": "30s", "60": "5"}},
	"FerryConsumerQueueBacklog":            {For: "4s", Numbers: map[string]string{"1000": "5"}},
	"FerryWorkflowTaskScheduleToStartHigh": {For: "4s", Numbers: map[string]string{"10m": "30s"}},
	"FerryRetentionStalled":                {For: "4s", Numbers: map[string]string{"10800": "3"}},
	"FerryOutboxDeadTuples":                {For: "4s", Numbers: map[string]string{"100000": "40"}},
	"FerryWALSlotRetainsWAL":               {For: "4s", Numbers: map[string]string{"1073741824": "4000000"}},
	"FerryWALSlotInactive":                 {For: "4s"},
}

// unitTestOnly are the rules whose fault this test does not drive, with the
// reason; deploy/prometheus/ferry-alerts.test.yml covers them.
var unitTestOnly = map[string]string{
	"FerryInboxCleanerStalled": "its fault is a cleaner that has not finished a round for a day",
}

const shippedRules = "../../deploy/prometheus/ferry-alerts.yml"

// testRules reads the shipped rules and applies rewrites: the test copy.
func testRules(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile(shippedRules)
	require.NoError(t, err)
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	seen := map[string]bool{}
	for _, group := range field(t, doc.Content[0], "groups").Content {
		for _, rule := range field(t, group, "rules").Content {
			name := field(t, rule, "alert").Value
			seen[name] = true
			rw, ok := rewrites[name]
			if !ok {
				require.Contains(t, unitTestOnly, name, "rule %s: give it test numbers in rewrites, or a reason in unitTestOnly", name)
				continue
			}
			expr := field(t, rule, "expr")
			used := map[string]bool{}
			rewritten := promNumbers(expr.Value, func(tok string) string {
				if n, ok := rw.Numbers[tok]; ok {
					used[tok] = true
					return n
				}
				return tok
			})
			for old := range rw.Numbers {
				require.True(t, used[old], "rule %s: %q is not in its expression any more: %s", name, old, expr.Value)
			}
			// Only numbers changed: with every number blanked, the two
			// expressions are the same text.
			blank := func(s string) string { return promNumbers(s, func(string) string { return "N" }) }
			require.Equal(t, blank(expr.Value), blank(rewritten), "rule %s", name)
			expr.Value = rewritten
			if rw.For != "" {
				f := field(t, rule, "for")
				require.Regexp(t, `^[0-9]+[smh]$`, f.Value)
				f.Value = rw.For
			}
		}
	}
	for name := range rewrites {
		require.True(t, seen[name], "rewrites name %s, which is no rule of %s", name, shippedRules)
	}
	for name := range unitTestOnly {
		require.True(t, seen[name], "unitTestOnly names %s, which is no rule of %s", name, shippedRules)
	}
	out, err := yaml.Marshal(&doc)
	require.NoError(t, err)
	return out
}

// field is the value of key in a YAML mapping node.
func field(t *testing.T, n *yaml.Node, key string) *yaml.Node {
	t.Helper()
	require.Equal(t, yaml.MappingNode, n.Kind, "looking for %q", key)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	t.Fatalf("no %q in the rules file at line %d", key, n.Line)
	return nil
}

// promNumbers replaces every number literal of a PromQL expression (a
// threshold, a duration: 300, 0.99, 10m, 1h30m) by f's answer, leaving
// string literals, identifiers (metric and label names with digits) and
// everything else as they are.
func promNumbers(expr string, f func(string) string) string {
	var b strings.Builder
	brackets := 0 // inside [range:step], ':' separates; elsewhere it is part of a name
	ident := func(c byte) bool {
		return c == '_' || c == ':' && brackets == 0 || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch c {
		case '[':
			brackets++
		case ']':
			brackets--
		}
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(expr))
			b.WriteString(expr[i:j])
			i = j
		case c >= '0' && c <= '9' && (i == 0 || !ident(expr[i-1]) && expr[i-1] != '.'):
			j := i
			for j < len(expr) && strings.IndexByte("0123456789.smhdwy", expr[j]) >= 0 {
				j++
			}
			b.WriteString(f(expr[i:j]))
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

func TestPromNumbers(t *testing.T) {
	t.Parallel()
	var got []string
	out := promNumbers(`histogram_quantile(0.99, sum by (le) (rate(x_2_bucket{le="10",s=~"a|b"}[10m:1m] offset 1h30m))) > 5`,
		func(tok string) string { got = append(got, tok); return "<" + tok + ">" })
	require.Equal(t, []string{"0.99", "10m", "1m", "1h30m", "5"}, got)
	require.Equal(t, `histogram_quantile(<0.99>, sum by (le) (rate(x_2_bucket{le="10",s=~"a|b"}[<10m>:<1m>] offset <1h30m>))) > <5>`, out)
}

// alertFigure is one alert's cycle under its fault: how long from the fault
// to firing, and from the repair to resolved.
type alertFigure struct {
	alert, fault  string
	fire, resolve time.Duration
}

type alertFigures struct {
	mu   sync.Mutex
	list []alertFigure
}

func (f *alertFigures) add(a *promAlert, fault string, faultAt, firedAt, fixedAt, clearAt time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, alertFigure{alert: a.String(), fault: fault, fire: firedAt.Sub(faultAt), resolve: clearAt.Sub(fixedAt)})
}

// scenario is one fault driven against a Ferry of its own, with a
// Prometheus of its own (the rules aggregate over everything scraped).
type scenario struct {
	name string
	jobs []string
	run  func(t *testing.T, p *promServer, figs *alertFigures)
}

func TestAlertsUnderFaults(t *testing.T) {
	t.Parallel()
	rules := testRules(t)
	scenarios := []scenario{
		{"unroutable", []string{"ferry"}, unroutableScenario},
		{"rabbitmq-stopped", []string{"ferry"}, brokerScenario},
		{"temporal-stopped", []string{"ferry", "temporal"}, temporalScenario},
		{"maintenance", []string{"ferry"}, maintenanceScenario},
		{"consumer", []string{"ferry"}, consumerScenario},
		{"wal-relay-stopped", []string{"ferry"}, walScenario},
	}
	// The servers outlive their scenarios: the dashboard and the labels
	// are checked on what they stored.
	proms := map[string]*promServer{}
	for _, s := range scenarios {
		proms[s.name] = startPrometheus(t, promConfig{Jobs: s.jobs, Rules: rules})
	}
	start := time.Now()
	figs := &alertFigures{}
	t.Run("faults", func(t *testing.T) {
		for _, s := range scenarios {
			t.Run(s.name, func(t *testing.T) {
				t.Parallel()
				s.run(t, proms[s.name], figs)
			})
		}
	})
	if t.Failed() {
		return
	}
	var lines []string
	for _, f := range figs.list {
		lines = append(lines, fmt.Sprintf("%-70s %-28s fired after %5.1fs, resolved %5.1fs after the repair", f.alert, f.fault, f.fire.Seconds(), f.resolve.Seconds()))
	}
	sort.Strings(lines)
	t.Logf("alerts under their faults (the test copy's numbers: rewrites):\n%s", strings.Join(lines, "\n"))
	t.Logf("faults took %s", time.Since(start).Round(time.Second))

	t.Run("dashboard", func(t *testing.T) { checkDashboard(t, proms, start) })
	t.Run("unit test labels", func(t *testing.T) { checkUnitTestLabels(t, proms) })
}

// runWithMetrics starts `ferry <sub>` with /metrics on a free port and
// returns it with that port's host:port.
func runWithMetrics(t *testing.T, e *env, sub string, extraEnv ...string) (*child, string) {
	t.Helper()
	c := e.startProcess(t, sub, append([]string{"FERRY_METRICS_ADDRESS=127.0.0.1:0"}, extraEnv...)...)
	u, err := url.Parse(metricsURL(t, c))
	require.NoError(t, err)
	return c, u.Host
}

// producer commits an event every interval from its own goroutine until
// the returned func is called (which waits for it). each returns the next
// event's aggregate id and type.
func producer(t *testing.T, e *env, every time.Duration, next func(i int) (aggID, eventType string)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			agg, typ := next(i)
			_, _ = e.commitType(ctx, agg, typ, false)
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return stop
}

// An event type nobody binds: every publish of it fails as Unroutable, each
// event is quarantined after its attempts (here 2) and blocks its
// aggregate. FerryPublishFailing (no event is delivered), FerryAggregateBlocked
// and FerryQuarantineSpike fire; binding the queue and retrying each blocked
// event by the repair signal an operator's batch sends resolves them.
func unroutableScenario(t *testing.T, p *promServer, figs *alertFigures) {
	e := setup(t)
	e.br.Unbind(t, "#")
	e.br.Bind(t, e.aggType+".changed")
	_, addr := runWithMetrics(t, e, "run", "FERRY_POLICY=nobody:max-attempts=2")
	p.AddTarget(t, "ferry", addr)
	// A quarantine of a new type counts whole only once Prometheus has
	// watched the process for the spike's window (the rule's guard against
	// a Prometheus restart).
	waitFor(t, time.Minute, "Prometheus to have scraped Ferry for 20s", func() bool {
		v, err := p.Query(`up{job="ferry"} offset 21s`)
		return err == nil && len(v) == 1
	})
	failing := p.Alert("FerryPublishFailing", map[string]string{"error_class": "Unroutable"})
	blocked := p.Alert("FerryAggregateBlocked", map[string]string{"aggregate_type": e.aggType})
	spike := p.Alert("FerryQuarantineSpike", nil)

	fault := time.Now()
	stop := producer(t, e, 500*time.Millisecond, func(i int) (string, string) { return fmt.Sprintf("poison-%d", i), "nobody" })
	firedFailing := failing.WaitFiring(t, 2*time.Minute, true)
	firedBlocked := blocked.WaitFiring(t, 2*time.Minute, true)
	firedSpike := spike.WaitFiring(t, 2*time.Minute, false)
	stop()
	// Events committed just before the stop may still be in their
	// retries: listed now, they would be quarantined after the repair
	// and keep their aggregates blocked.
	waitFor(t, time.Minute, "every poison event quarantined", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status NOT IN ('quarantined', 'published')`) == 0
	})

	// The repair: bind the queue, then retry every blocked aggregate by
	// the ferry.repair signal (what `temporal workflow signal --query` sends
	// each). One request first names the wrong class and is rejected.
	ctx := context.Background()
	e.br.Bind(t, e.aggType+".nobody")
	rows, err := e.db.Pool.Query(ctx, `SELECT DISTINCT aggregate_id FROM outbox_events WHERE status = 'quarantined'`)
	require.NoError(t, err)
	aggs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Greater(t, len(aggs), 10)
	signal := func(agg, class string) {
		t.Helper()
		require.NoError(t, tclient.SignalWorkflow(ctx, workflows.WorkflowID(e.aggType, agg), "", workflows.RepairSignal, workflows.RepairRequest{
			RequestID: "bind-" + class + "-" + agg, Action: workflows.ActionRetry, ExpectErrorClass: class, Actor: "e2e", Reason: "queue bound"}))
	}
	signal(aggs[0], "PayloadTooLarge")
	fixed := time.Now()
	for _, agg := range aggs {
		signal(agg, "Unroutable")
	}
	figs.add(failing, "unroutable event type", fault, firedFailing, fixed, failing.WaitResolved(t, 2*time.Minute))
	figs.add(blocked, "unroutable event type", fault, firedBlocked, fixed, blocked.WaitResolved(t, 2*time.Minute))
	figs.add(spike, "unroutable event type", fault, firedSpike, fixed, spike.WaitResolved(t, 2*time.Minute))
	waitFor(t, time.Minute, "every poison event delivered after the repair", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status <> 'published'`) == 0
	})
	v, err := p.Query(`ferry_repair_rejected`)
	require.NoError(t, err)
	require.NotEmpty(t, v, "the rejected repair signal is counted")
}

// RabbitMQ stopped (the fault suite's private node): publishes fail as
// BrokerUnavailable and dispatched events age. FerryPublishFailing and
// FerryBacklogOld fire; once the node is back the backlog drains, they
// resolve, and the drained events' latency fires FerryLatencyHigh, which
// resolves when its window has passed.
func brokerScenario(t *testing.T, p *promServer, figs *alertFigures) {
	mq := servers.StartRabbitNode(t, "")
	e := setupOn(t, ferrytest.NewDB(t, ""), ferrytest.NewBroker(t, mq.URL))
	_, addr := runWithMetrics(t, e, "run")
	p.AddTarget(t, "ferry", addr)
	e.warmUp(t)
	failing := p.Alert("FerryPublishFailing", map[string]string{"error_class": "BrokerUnavailable"})
	old := p.Alert("FerryBacklogOld", map[string]string{"aggregate_type": e.aggType})
	latency := p.Alert("FerryLatencyHigh", nil)

	fault := time.Now()
	mq.Stop(t)
	stop := producer(t, e, time.Second, func(i int) (string, string) { return aggID(i % 4), "changed" })
	firedFailing := failing.WaitFiring(t, 2*time.Minute, true)
	firedOld := old.WaitFiring(t, 2*time.Minute, true)
	stop()
	mq.Start(t)
	fixed := time.Now()
	figs.add(failing, "RabbitMQ stopped", fault, firedFailing, fixed, failing.WaitResolved(t, 2*time.Minute))
	figs.add(old, "RabbitMQ stopped", fault, firedOld, fixed, old.WaitResolved(t, 2*time.Minute))
	firedLatency := latency.WaitFiring(t, 2*time.Minute, true)
	figs.add(latency, "RabbitMQ stopped", fault, firedLatency, fixed, latency.WaitResolved(t, 2*time.Minute))
}

// Temporal stopped (a server process of the test's own, killed): the
// poller's starts and signals fail, rows stay pending and pile up.
// FerrySignalsFailing, FerryBacklogOld and FerryBacklogGrowing fire;
// Prometheus sees the server's own /metrics go down. The server started
// again on its data, the backlog drains and they resolve.
func temporalScenario(t *testing.T, p *promServer, figs *alertFigures) {
	o := startOwnTemporalWith(t, &ownTemporal{metricsAddr: ferrytest.ClosedAddr(t)})
	e := setup(t)
	_, addr := runWithMetrics(t, e, "run", o.env()...)
	p.AddTarget(t, "ferry", addr)
	p.AddTarget(t, "temporal", o.metricsAddr)
	e.warmUp(t)
	signals := p.Alert("FerrySignalsFailing", nil)
	old := p.Alert("FerryBacklogOld", map[string]string{"aggregate_type": e.aggType})
	growing := p.Alert("FerryBacklogGrowing", nil)

	fault := time.Now()
	o.kill()
	stop := producer(t, e, 300*time.Millisecond, func(i int) (string, string) { return aggID(i % 8), "changed" })
	firedSignals := signals.WaitFiring(t, 2*time.Minute, true)
	firedOld := old.WaitFiring(t, 2*time.Minute, true)
	firedGrowing := growing.WaitFiring(t, 2*time.Minute, true)
	v, err := p.Query(`up{job="temporal"} == 0`)
	require.NoError(t, err)
	require.Len(t, v, 1, "Prometheus sees the Temporal server down")
	stop()
	o.start(t)
	fixed := time.Now()
	figs.add(signals, "Temporal stopped", fault, firedSignals, fixed, signals.WaitResolved(t, 2*time.Minute))
	figs.add(old, "Temporal stopped", fault, firedOld, fixed, old.WaitResolved(t, 2*time.Minute))
	figs.add(growing, "Temporal stopped", fault, firedGrowing, fixed, growing.WaitResolved(t, 2*time.Minute))
	waitFor(t, time.Minute, "the backlog delivered", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status <> 'published'`) == 0
	})
}

// The maintenance faults, one after the other on one Ferry whose
// PostgreSQL connections go through a proxy:
//   - a retention run that waits on a lock (a long transaction holds the
//     rows past retention): FerryRetentionStalled, resolved once the
//     transaction ends and the run finishes;
//   - an aggregate whose rows are dispatched to a workflow that does not
//     exist: the drift check's FerryDriftFound, resolved when its window
//     has passed after the reconciler re-dispatched the rows;
//   - a snapshot held open while events flow, so vacuum cannot remove the
//     dead row versions: FerryOutboxDeadTuples, resolved by ending it and
//     running VACUUM;
//   - PostgreSQL unreachable for Ferry: FerryOutboxUnreadable.
//
// On a private PostgreSQL: on the shared one, any other session's snapshot
// holds back vacuum too, so the dead row versions would outlive the repair.
func maintenanceScenario(t *testing.T, p *promServer, figs *alertFigures) {
	e := setupOn(t, ferrytest.NewDB(t, servers.StartPrivatePostgres(t).URL), ferrytest.NewBroker(t, ""))
	ctx := context.Background()
	proxy := servers.NewProxy(t, postgresHost(t, e.db.URL))
	_, addr := runWithMetrics(t, e, "run", "FERRY_POSTGRES_URL="+withHost(t, withParam(e.db.URL, "application_name", e.db.Schema+"/run"), proxy.Addr()))
	runRetention := func(id string) client.WorkflowRun {
		t.Helper()
		run, err := tclient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: e.taskQueue}, workflows.RetentionWorkflowName,
			workflows.RetentionInput{RowAge: time.Hour})
		require.NoError(t, err)
		return run
	}
	// The healthy state first: a retention run that succeeded.
	require.NoError(t, runRetention("retention-ok-"+e.taskQueue).Get(ctx, nil))
	p.AddTarget(t, "ferry", addr)
	e.warmUp(t)

	// 1. Retention stalled behind a lock.
	retention := p.Alert("FerryRetentionStalled", nil)
	_, err := e.db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, published_at)
		SELECT $1, 'old-' || g, 'changed', '{}', 'published', now() - interval '3 hours', now() - interval '2 hours' FROM generate_series(1, 30) g`, e.aggType)
	require.NoError(t, err)
	lock, err := e.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, `SELECT id FROM outbox_events WHERE aggregate_id LIKE 'old-%' FOR UPDATE`)
	require.NoError(t, err)
	fault := time.Now()
	stalled := runRetention("retention-stalled-" + e.taskQueue)
	fired := retention.WaitFiring(t, 2*time.Minute, true)
	v, err := p.Query(`ferry_retention_overdue_rows`)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.Equal(t, 30.0, v[0].Value, "the stalled run counted the rows past retention")
	require.NoError(t, lock.Rollback(ctx))
	fixed := time.Now()
	require.NoError(t, stalled.Get(ctx, nil))
	figs.add(retention, "retention run waits on a lock", fault, fired, fixed, retention.WaitResolved(t, 2*time.Minute))

	// 2. Drift: rows dispatched to a workflow that is not there.
	drift := p.Alert("FerryDriftFound", map[string]string{"kind": workflows.DriftWorkflowGone})
	_, err = e.db.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, dispatched_at)
		VALUES ($1, 'drifted', 'changed', '{}', 'dispatched', now() - interval '5 minutes')`, e.aggType)
	require.NoError(t, err)
	fault = time.Now()
	var res workflows.ReconcileResult
	runWorkflow(t, e, "reconcile-drift-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Hour, DriftGrace: time.Minute, DriftSettle: 200 * time.Millisecond}, &res)
	require.NotNil(t, res.Drift)
	require.NotEmpty(t, res.Drift.Drifted)
	fired = drift.WaitFiring(t, 2*time.Minute, false)
	runWorkflow(t, e, "reconcile-repair-"+e.taskQueue, workflows.ReconcileWorkflowName,
		workflows.ReconcileInput{OlderThan: time.Minute, DriftGrace: time.Minute, DriftSettle: 200 * time.Millisecond}, &res)
	require.Equal(t, int64(1), res.Redispatched)
	fixed = time.Now()
	figs.add(drift, "rows dispatched to no workflow", fault, fired, fixed, drift.WaitResolved(t, 2*time.Minute))

	// 3. Dead row versions vacuum may not remove.
	dead := p.Alert("FerryOutboxDeadTuples", nil)
	snapshot, err := e.db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	require.NoError(t, snapshot.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(new(int)))
	fault = time.Now()
	e.commitN(t, 40, 8)
	fired = dead.WaitFiring(t, 2*time.Minute, true)
	require.NoError(t, snapshot.Rollback(ctx))
	_, err = e.db.Pool.Exec(ctx, `VACUUM outbox_events`)
	require.NoError(t, err)
	fixed = time.Now()
	figs.add(dead, "snapshot held, events flow", fault, fired, fixed, dead.WaitResolved(t, 2*time.Minute))

	// 4. PostgreSQL unreachable for Ferry.
	unreadable := p.Alert("FerryOutboxUnreadable", nil)
	fault = time.Now()
	proxy.Pause()
	fired = unreadable.WaitFiring(t, 2*time.Minute, true)
	proxy.Resume()
	fixed = time.Now()
	figs.add(unreadable, "PostgreSQL unreachable", fault, fired, fixed, unreadable.WaitResolved(t, 2*time.Minute))
}

// postgresHost is the host:port of a PostgreSQL URL.
func postgresHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Host
}

// withHost is raw with its host:port replaced.
func withHost(t *testing.T, raw, host string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.Host = host
	return u.String()
}

// The worker down while events are committed (poller, worker and the
// example consumer as processes of their own, as a deployment runs them):
// once the worker starts, its first workflow tasks have waited on the task
// queue, and the consumer applies events long after their commit.
// FerryWorkflowTaskScheduleToStartHigh and FerryConsumerLagHigh fire, and
// resolve when their window has passed. Then messages of a schema version
// the consumer cannot read are parked in its .dlq: FerryConsumerQueueBacklog
// fires and resolves once the .dlq is emptied. The events also charge and
// send an e-mail through the sandboxes, for the dashboard's effect panels.
func consumerScenario(t *testing.T, p *promServer, figs *alertFigures) {
	e := setup(t)
	ctx := context.Background()
	provider, err := payprovider.New(payprovider.Config{})
	require.NoError(t, err)
	require.NoError(t, provider.Start(ctx))
	t.Cleanup(provider.Stop)
	// Every first request of a charge loses its answer: its outcome is
	// unknown, and the effect looks the key up.
	provider.SetFaults(func(r payprovider.Request) payprovider.Fault {
		if r.Method == "POST" && r.Seen == 0 {
			return payprovider.FaultDropAfterCommit
		}
		return payprovider.FaultNone
	})
	sink, err := smtpsink.New(smtpsink.Config{})
	require.NoError(t, err)
	require.NoError(t, sink.Start(ctx))
	t.Cleanup(sink.Stop)
	ferryEnv := []string{"FERRY_ROUTING_KEY=order.{event_type}", "FERRY_EFFECTS=" + e.aggType + ".created=charge,email:confirmation",
		"FERRY_PAYMENTS_URL=" + provider.URL(), "FERRY_SMTP_ADDRESS=" + sink.Addr()}

	queue := ferrytest.Name("inventory")
	conn, err := amqp.Dial(e.br.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { ferrytest.DeleteConsumerTopology(ch, queue) })
	consumer := e.spawn(t, []string{"consume-example", "--queue", queue}, childEnv+"=1", "FERRY_METRICS_ADDRESS=127.0.0.1:0")
	consumerAddr := regexp.MustCompile(`/metrics on http://([0-9.:]+)/metrics`)
	waitFor(t, 30*time.Second, "the consumer's /metrics address", func() bool { return consumerAddr.MatchString(consumer.out.String()) })
	p.AddTarget(t, "ferry", consumerAddr.FindStringSubmatch(consumer.out.String())[1])
	_, pollerAddr := runWithMetrics(t, e, "poller", ferryEnv...)
	p.AddTarget(t, "ferry", pollerAddr)
	waitFor(t, 30*time.Second, "the consumer's queue on /metrics", func() bool {
		v, err := p.Query(fmt.Sprintf(`ferry_consumer_queue_messages{queue=%q}`, queue))
		return err == nil && len(v) == 1
	})
	order := func(agg string, schemaVersion int) {
		t.Helper()
		payload, _ := json.Marshal(map[string]any{"order_id": agg, "customer": "ana", "total_cents": 2500, "units": 1,
			"amount": 2500, "email": agg + "@example.com"})
		require.NoError(t, pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
			_, err := e.writer.Write(ctx, tx, outbox.Event{ID: uuid.Must(uuid.NewV7()), AggregateType: e.aggType, AggregateID: agg,
				EventType: "created", SchemaVersion: schemaVersion, Payload: payload})
			return err
		}))
	}

	// 1. The worker cut off from Temporal for 10 s (its connection goes
	// through a proxy) while orders come in. The process stays up and
	// scraped: a worker process that is new to Prometheus has new series,
	// whose first observations rate() cannot see.
	toTemporal := servers.NewProxy(t, temporalAddr)
	_, workerAddr := runWithMetrics(t, e, "worker", append([]string{"FERRY_TEMPORAL_ADDRESS=" + toTemporal.Addr()}, ferryEnv...)...)
	p.AddTarget(t, "ferry", workerAddr)
	order("warm", 2)
	waitFor(t, time.Minute, "the first order applied", func() bool { return strings.Contains(consumer.out.String(), "order warm") })
	s2s := p.Alert("FerryWorkflowTaskScheduleToStartHigh", map[string]string{"task_queue": e.taskQueue})
	lag := p.Alert("FerryConsumerLagHigh", map[string]string{"consumer": "inventory"})
	fault := time.Now()
	toTemporal.Pause()
	for i := range 10 {
		order(fmt.Sprintf("late-%d", i), 2)
	}
	time.Sleep(10 * time.Second)
	toTemporal.Resume()
	fixed := time.Now()
	firedS2S := s2s.WaitFiring(t, 2*time.Minute, true)
	firedLag := lag.WaitFiring(t, 2*time.Minute, true)
	figs.add(s2s, "worker cut off from Temporal 10s", fault, firedS2S, fixed, s2s.WaitResolved(t, 2*time.Minute))
	figs.add(lag, "worker cut off from Temporal 10s", fault, firedLag, fixed, lag.WaitResolved(t, 2*time.Minute))

	// 2. Messages the consumer cannot read pile up in its .dlq.
	parked := p.Alert("FerryConsumerQueueBacklog", map[string]string{"queue": queue + ".dlq"})
	fault = time.Now()
	for i := range 8 {
		order(fmt.Sprintf("v9-%d", i), 9)
	}
	fired := parked.WaitFiring(t, 2*time.Minute, true)
	_, err = ch.QueuePurge(queue+".dlq", false)
	require.NoError(t, err)
	fixed = time.Now()
	figs.add(parked, "unreadable schema version parked", fault, fired, fixed, parked.WaitResolved(t, 2*time.Minute))
	waitFor(t, time.Minute, "every effect done", func() bool {
		v, err := p.Query(`ferry_effect_payment_lookups_total`)
		return err == nil && len(v) > 0
	})
}

// The log-tailing relay (--source wal, on a private PostgreSQL with
// wal_level=logical) killed while writes go on: nobody streams from the
// replication slot and it keeps the WAL written since. FerryWALSlotInactive
// and FerryWALSlotRetainsWAL fire; the worker, which serves the slot's
// metrics too, stays up. The relay started again streams, confirms, and
// both resolve.
func walScenario(t *testing.T, p *promServer, figs *alertFigures) {
	e, _ := walEnv(t)
	ctx := context.Background()
	worker := e.walProcess(t, "worker", "worker", "FERRY_METRICS_ADDRESS=127.0.0.1:0")
	u, err := url.Parse(metricsURL(t, worker))
	require.NoError(t, err)
	relay := e.walProcess(t, "poller", "wal-a")
	e.activeWALRelay(t, time.Minute)
	p.AddTarget(t, "ferry", u.Host)
	e.warmUp(t)
	inactive := p.Alert("FerryWALSlotInactive", map[string]string{"slot": "ferry_outbox"})
	retains := p.Alert("FerryWALSlotRetainsWAL", map[string]string{"slot": "ferry_outbox"})

	fault := time.Now()
	relay.kill()
	e.commitN(t, 20, 4)
	// About 8 MB of WAL from the business side, as a busy database writes.
	_, err = e.db.Pool.Exec(ctx, `INSERT INTO orders (id, note) SELECT 'bulk-' || g, repeat(md5(g::text), 32) FROM generate_series(1, 4000) g`)
	require.NoError(t, err)
	firedInactive := inactive.WaitFiring(t, 2*time.Minute, true)
	firedRetains := retains.WaitFiring(t, 2*time.Minute, true)
	e.walProcess(t, "poller", "wal-a")
	fixed := time.Now()
	figs.add(inactive, "WAL relay killed", fault, firedInactive, fixed, inactive.WaitResolved(t, 2*time.Minute))
	figs.add(retains, "WAL relay killed", fault, firedRetains, fixed, retains.WaitResolved(t, 3*time.Minute))
	waitFor(t, time.Minute, "the events committed meanwhile delivered", func() bool {
		return e.count(t, `SELECT count(*) FROM outbox_events WHERE status <> 'published'`) == 0
	})
}

// dashboardPanel is a panel of the Grafana dashboard and its queries.
type dashboardPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

// notDriven are the dashboard queries this test's faults do not give data,
// and why; each must still parse and evaluate.
var notDriven = map[string]string{
	`sum by (workflow_type, failure_reason) (rate(temporal_workflow_task_execution_failed{namespace=~"$namespace"}[5m]))`: "a workflow task fails only on a bug (a panic, non-determinism) in workflow code",
	`sum by (operation) (rate(temporal_request_resource_exhausted{namespace=~"$namespace"}[5m]))`:                         "only a rate-limited Temporal server answers RESOURCE_EXHAUSTED",
	// Seen in some runs, not in others:
	`sum by (task_queue) (rate(temporal_activity_poll_no_task{namespace=~"$namespace"}[5m]))`: "an activity poll comes back empty after the server's long-poll timeout (a minute) without an activity task; the scenarios are about that long and publish through local activities",
	`sum (rate(temporal_sticky_cache_miss{namespace=~"$namespace"}[5m]))`:                     "a miss needs a workflow evicted from a full sticky cache (10,000 by default) while its run goes on",
}

// checkDashboard evaluates every query of the dashboard on every scenario's
// Prometheus over the run: each must parse and evaluate everywhere, and
// return data on at least one, unless notDriven says why not; every panel
// must show data.
func checkDashboard(t *testing.T, proms map[string]*promServer, start time.Time) {
	raw, err := os.ReadFile("../../deploy/grafana/ferry-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Panels []dashboardPanel `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	end := time.Now()
	var missing []string
	for _, panel := range dash.Panels {
		if panel.Type == "row" {
			continue
		}
		shown := false
		for _, tg := range panel.Targets {
			expr := strings.ReplaceAll(tg.Expr, "$namespace", ".*")
			series := 0
			for name, p := range proms {
				n, err := p.QueryRange(expr, start, end, 2*time.Second)
				require.NoError(t, err, "panel %q on the %s server", panel.Title, name)
				series += n
			}
			if series > 0 {
				shown = true
				if why, ok := notDriven[tg.Expr]; ok {
					t.Logf("panel %q: %q has data although notDriven says %q", panel.Title, tg.Expr, why)
				}
				continue
			}
			if why, ok := notDriven[tg.Expr]; ok {
				t.Logf("panel %q: no data for %q: %s", panel.Title, tg.LegendFormat, why)
				continue
			}
			missing = append(missing, fmt.Sprintf("panel %q: %s", panel.Title, tg.Expr))
		}
		require.True(t, shown, "panel %q shows no data", panel.Title)
	}
	require.Empty(t, missing, "dashboard queries without data after the faults")
}

// checkUnitTestLabels compares the series of the promtool tests with what
// the servers scraped: a metric the faults produced must have been served
// with exactly the label names the test gives it (job and instance
// included). The Temporal SDK's metrics must be among them: their labels
// are the SDK's, which no definition in this repository states.
func checkUnitTestLabels(t *testing.T, proms map[string]*promServer) {
	raw, err := os.ReadFile("../../deploy/prometheus/ferry-alerts.test.yml")
	require.NoError(t, err)
	var file struct {
		Tests []struct {
			Series []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	series := regexp.MustCompile(`^(\w+)\{(.*)\}$`)
	labelName := regexp.MustCompile(`(\w+)=`)
	served := map[string][]string{} // metric → label name sets seen, each "a,b,c"
	compared := 0
	for _, tc := range file.Tests {
		for _, s := range tc.Series {
			m := series.FindStringSubmatch(s.Series)
			require.NotNil(t, m, s.Series)
			var names []string
			for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
				names = append(names, l[1])
			}
			slices.Sort(names)
			want := strings.Join(names, ",")
			sets, ok := served[m[1]]
			if !ok {
				for _, p := range proms {
					got, err := p.Series(fmt.Sprintf(`{__name__=%q}`, m[1]))
					require.NoError(t, err)
					for _, g := range got {
						var ns []string
						for k := range g {
							if k != "__name__" {
								ns = append(ns, k)
							}
						}
						slices.Sort(ns)
						sets = append(sets, strings.Join(ns, ","))
					}
				}
				served[m[1]] = sets
			}
			if len(sets) == 0 {
				require.False(t, strings.HasPrefix(m[1], "temporal_"), "the faults served no %s to compare the tests' labels with", m[1])
				continue
			}
			require.Contains(t, sets, want, "%s in ferry-alerts.test.yml: no series was served with these label names", s.Series)
			compared++
		}
	}
	t.Logf("%d test series compared with scraped label sets", compared)
}
