package e2e

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/internal/testenv"
	"github.com/ferry-outbox/ferry/metrics"
)

// sample reads one sample of a counter, gauge or histogram (its count) from
// reg whose labels include labels; 0 when absent.
func sample(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			default:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// While RabbitMQ is away the backlog's age grows on /metrics; once it is
// back the backlog drains and the publish counters and latency show it.
func TestMetricsFollowABacklog(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	reg.MustRegister(metrics.NewOutboxCollector(e.db.Pool))
	proxy := testenv.NewProxy(t, "127.0.0.1:5672")
	e.startFerry(t, ferryOpts{amqpURL: "amqp://guest:guest@" + proxy.Addr() + "/", metrics: m})
	e.warmUp(t)

	proxy.Pause()
	e.commitN(t, 6, 2)
	undelivered := func() float64 {
		return sample(t, reg, "ferry_outbox_events", map[string]string{"aggregate_type": e.aggType, "status": "dispatched"}) +
			sample(t, reg, "ferry_outbox_events", map[string]string{"aggregate_type": e.aggType, "status": "pending"})
	}
	oldest := func() float64 {
		return max(sample(t, reg, "ferry_outbox_oldest_age_seconds", map[string]string{"aggregate_type": e.aggType, "status": "dispatched"}),
			sample(t, reg, "ferry_outbox_oldest_age_seconds", map[string]string{"aggregate_type": e.aggType, "status": "pending"}))
	}
	waitFor(t, 10*time.Second, "the backlog on /metrics", func() bool { return undelivered() == 6 })
	first := oldest()
	waitFor(t, 10*time.Second, "the backlog's age to grow", func() bool { return oldest() > first+1 })
	require.Positive(t, sample(t, reg, "ferry_publish_failures_total", map[string]string{"error_class": "BrokerUnavailable"}))

	proxy.Resume()
	waitFor(t, 90*time.Second, "the backlog to drain", func() bool { return undelivered() == 0 })
	require.Zero(t, oldest(), "no undelivered row left to be old")
	require.Equal(t, 7.0, sample(t, reg, "ferry_published_total", map[string]string{"aggregate_type": e.aggType}))
	require.Equal(t, 7.0, sample(t, reg, "ferry_commit_to_published_seconds", nil), "one latency sample per event")
	require.Positive(t, sample(t, reg, "ferry_outbox_table_bytes", nil))
}
