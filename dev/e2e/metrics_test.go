package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
	"github.com/ferry-outbox/ferry/metrics"
)

// While RabbitMQ is away the backlog's age grows on /metrics; once it is
// back the backlog drains and the publish counters and latency show it.
func TestMetricsFollowABacklog(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	reg.MustRegister(metrics.NewOutboxCollector(e.db.Pool))
	proxy := servers.NewProxy(t, "127.0.0.1:5672")
	e.startFerry(t, ferryOpts{amqpURL: "amqp://guest:guest@" + proxy.Addr() + "/", metrics: m})
	e.warmUp(t)

	proxy.Pause()
	e.commitN(t, 6, 2)
	undelivered := func() float64 {
		return ferrytest.Sample(t, reg, "ferry_outbox_events", map[string]string{"aggregate_type": e.aggType, "status": "dispatched"}) +
			ferrytest.Sample(t, reg, "ferry_outbox_events", map[string]string{"aggregate_type": e.aggType, "status": "pending"})
	}
	oldest := func() float64 {
		return max(ferrytest.Sample(t, reg, "ferry_outbox_oldest_age_seconds", map[string]string{"aggregate_type": e.aggType, "status": "dispatched"}),
			ferrytest.Sample(t, reg, "ferry_outbox_oldest_age_seconds", map[string]string{"aggregate_type": e.aggType, "status": "pending"}))
	}
	waitFor(t, 10*time.Second, "the backlog on /metrics", func() bool { return undelivered() == 6 })
	first := oldest()
	waitFor(t, 10*time.Second, "the backlog's age to grow", func() bool { return oldest() > first+1 })
	require.Positive(t, ferrytest.Sample(t, reg, "ferry_publish_failures_total", map[string]string{"error_class": "BrokerUnavailable"}))

	proxy.Resume()
	waitFor(t, 90*time.Second, "the backlog to drain", func() bool { return undelivered() == 0 })
	require.Zero(t, oldest(), "no undelivered row left to be old")
	require.Equal(t, 7.0, ferrytest.Sample(t, reg, "ferry_published_total", map[string]string{"aggregate_type": e.aggType}))
	require.Equal(t, 7.0, ferrytest.Sample(t, reg, "ferry_commit_to_published_seconds", nil), "one latency sample per event")
	require.Positive(t, ferrytest.Sample(t, reg, "ferry_outbox_table_bytes", nil))
}

// `ferry consume-example --metrics-address` serves the consumer's metrics:
// what it applied, the duplicate its inbox dropped, the message it
// quarantined, the lag from the commit, and its queues' depth.
func TestConsumeExampleServesConsumerMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t)
	queue := ferrytest.Name("inventory")
	c := e.spawn(t, []string{"consume-example", "--queue", queue}, childEnv+"=1", "FERRY_METRICS_ADDRESS=127.0.0.1:0")
	addr := regexp.MustCompile(`/metrics on http://([0-9.:]+)/metrics`)
	waitFor(t, 30*time.Second, "the consumer's /metrics address", func() bool { return addr.MatchString(c.out.String()) })
	url := "http://" + addr.FindStringSubmatch(c.out.String())[1] + "/metrics"
	waitFor(t, 30*time.Second, "the consumer's queue", func() bool { return strings.Contains(scrape(t, url), `queue="`+queue+`"`) })

	conn, err := amqp.Dial(e.br.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { ferrytest.DeleteConsumerTopology(ch, queue) })
	require.NoError(t, ch.Confirm(false))
	send := func(id string, schema int64) {
		t.Helper()
		dc, err := ch.PublishWithDeferredConfirm(e.br.Exchange, "order.created", true, false, amqp.Publishing{
			Headers: amqp.Table{broker.HeaderAggregateType: "order", broker.HeaderAggregateID: id,
				broker.HeaderAggregateVersion: int64(1), broker.HeaderSchemaVersion: schema},
			MessageId: id, Type: "created", Timestamp: time.Now().Add(-2 * time.Second),
			Body: []byte(`{"order_id":"` + id + `","customer":"ana","total_cents":1000,"units":1}`),
		})
		require.NoError(t, err)
		require.True(t, dc.Wait())
	}
	send("o-1", 2)
	send("o-1", 2) // as the broker redelivers after a crash between commit and ack
	send("o-2", 9) // a schema this consumer does not read

	want := []string{
		`ferry_consumer_events_total{consumer="inventory",outcome="applied"} 1`,
		`ferry_consumer_events_total{consumer="inventory",outcome="duplicate"} 1`,
		`ferry_consumer_events_total{consumer="inventory",outcome="quarantined"} 1`,
		`ferry_consumer_dead_lettered_total{cause="schema-version",consumer="inventory"} 1`,
		`ferry_consumer_lag_seconds_count{consumer="inventory"} 1`,
		`ferry_consumer_queue_messages{consumer="inventory",queue="` + queue + `.dlq"} 1`,
		// The inbox cleaner's first round ran at start: nothing expired.
		`ferry_inbox_cleaned_rows_total{consumer="inventory"} 0`,
		`ferry_inbox_cleaned_timestamp_seconds{consumer="inventory"} `,
	}
	var body string
	waitFor(t, 30*time.Second, "the consumer's metrics", func() bool {
		body = scrape(t, url)
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	})
	require.Contains(t, body, `ferry_consumer_lag_seconds_bucket{consumer="inventory",le="1"} 0`, "committed 2s before it was sent")
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// `ferry run --metrics-address` says where its /metrics are and serves
// there what it did: the events it published and the outbox's state.
func TestRunServesMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.startProcess(t, "run", "FERRY_METRICS_ADDRESS=127.0.0.1:0")
	url := metricsURL(t, c)

	e.commitN(t, 4, 2)
	e.br.Collect(t, 4, time.Minute)
	want := []string{
		`ferry_published_total{aggregate_type="` + e.aggType + `"} 4`,
		`ferry_commit_to_published_seconds_count 4`,
		`ferry_relay_claimed_total 4`,
		`ferry_outbox_scrape_error 0`,
		`ferry_outbox_table_bytes `,
	}
	backlog := `ferry_outbox_events{aggregate_type="` + e.aggType + `"`
	waitFor(t, 30*time.Second, "ferry run's metrics, with no backlog left", func() bool {
		body := scrape(t, url)
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return !strings.Contains(body, backlog)
	})
}
