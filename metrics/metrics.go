package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-outbox/ferry/relaydb"
)

// Metrics are the counters Ferry's components increment. A nil *Metrics is
// valid and counts nothing, so components work without metrics.
type Metrics struct {
	quarantined *prometheus.CounterVec
	repairs     *prometheus.CounterVec
	relay       *Relay

	// reg is what New registered on, for the components that register
	// their own metrics (the effect activities).
	reg prometheus.Registerer
}

// New creates Ferry's counters and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_events_quarantined_total",
			Help: "Events whose publish retries ran out or failed permanently, by event type and error class.",
		}, []string{"event_type", "error_class"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_repairs_total",
			Help: "Repairs and replays applied (audited), by action.",
		}, []string{"action"}),
	}
	if err := register(reg, m.quarantined, m.repairs); err != nil {
		return nil, err
	}
	var err error
	if m.relay, err = NewRelay(reg); err != nil {
		return nil, err
	}
	m.relay.quarantined = m.quarantined
	m.reg = reg
	return m, nil
}

// Relay is the poller's and the publish activity's part; nil when m is.
func (m *Metrics) Relay() *Relay {
	if m == nil {
		return nil
	}
	return m.relay
}

// Registerer is the registerer New registered on: components that define
// their own metrics (effects/email, effects/payment) register them there,
// so they are served with the rest. Nil when m is.
func (m *Metrics) Registerer() prometheus.Registerer {
	if m == nil {
		return nil
	}
	return m.reg
}

// Quarantined counts one quarantined event.
func (m *Metrics) Quarantined(eventType, errorClass string) {
	if m != nil {
		m.quarantined.WithLabelValues(eventType, errorClass).Inc()
	}
}

// Repaired counts one applied repair or replay.
func (m *Metrics) Repaired(action string) {
	if m != nil {
		m.repairs.WithLabelValues(action).Inc()
	}
}

// outboxCollector reads the outbox's undelivered rows at scrape time, so the
// figures are right whichever Ferry process is scraped.
type outboxCollector struct {
	pool    *pgxpool.Pool
	events  *prometheus.Desc
	age     *prometheus.Desc
	nextDue *prometheus.Desc
	errDesc *prometheus.Desc
	size    *prometheus.Desc

	liveRows, deadRows, indexBytes *prometheus.Desc
	retentionSuccess, overdue      *prometheus.Desc
}

// NewOutboxCollector returns a collector of
// ferry_outbox_events{aggregate_type,status} and
// ferry_outbox_oldest_age_seconds{aggregate_type,status} over rows that are
// not yet delivered (pending, delayed, dispatched, quarantined; skipped
// rows were given up on purpose and are not a backlog). Delayed rows wait
// for their deliver_after: they are counted apart from pending ones, have
// no age (they are not late), and ferry_outbox_next_due_seconds says when
// the first of them becomes deliverable.
//
// It also reports the table's health from PostgreSQL's statistics and
// catalogs (live and dead row versions, each index's size: no scan), and the
// retention record the retention runs keep in ferry_maintenance (when one
// last succeeded, how many rows past retention the last one found).
func NewOutboxCollector(pool *pgxpool.Pool) prometheus.Collector {
	labels := []string{"aggregate_type", "status"}
	return &outboxCollector{
		pool:    pool,
		events:  prometheus.NewDesc("ferry_outbox_events", "Outbox rows not yet delivered (pending, delayed: waiting for their deliver_after, dispatched, quarantined), by aggregate type and status.", labels, nil),
		age:     prometheus.NewDesc("ferry_outbox_oldest_age_seconds", "How long the oldest row not yet delivered has been deliverable (since created_at, or deliver_after when later), by aggregate type and status; none for delayed rows.", labels, nil),
		nextDue: prometheus.NewDesc("ferry_outbox_next_due_seconds", "Time until the first delayed row of the aggregate type becomes deliverable.", []string{"aggregate_type"}, nil),
		errDesc: prometheus.NewDesc("ferry_outbox_scrape_error", "1 when reading the outbox for this scrape failed.", nil, nil),
		size:    prometheus.NewDesc("ferry_outbox_table_bytes", "Size of outbox_events with its indexes and TOAST (retention keeps it bounded).", nil, nil),
		liveRows: prometheus.NewDesc("ferry_outbox_live_rows",
			"Row versions of outbox_events PostgreSQL's statistics count as live (n_live_tup: an estimate, no scan).", nil, nil),
		deadRows: prometheus.NewDesc("ferry_outbox_dead_rows",
			"Dead row versions of outbox_events not yet removed by vacuum (n_dead_tup); each still has an entry in every index, which the claim's index scan walks.", nil, nil),
		indexBytes: prometheus.NewDesc("ferry_outbox_index_bytes",
			"Size of each index of outbox_events (pg_relation_size), by index name.", []string{"index"}, nil),
		retentionSuccess: prometheus.NewDesc("ferry_retention_last_success_timestamp_seconds",
			"When a retention run last finished without error (Unix time; ferry_maintenance). Until one has: when the schema got its retention record (migration 0013).", nil, nil),
		overdue: prometheus.NewDesc("ferry_retention_overdue_rows",
			"Delivered rows past the retention age, counted by the last retention run at its start (0 once a run finished); absent until a run has counted.", nil, nil),
	}
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.age
	ch <- c.nextDue
	ch <- c.errDesc
	ch <- c.size
	ch <- c.liveRows
	ch <- c.deadRows
	ch <- c.indexBytes
	ch <- c.retentionSuccess
	ch <- c.overdue
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := 0.0
	backlog, err := relaydb.ReadBacklog(ctx, c.pool)
	for _, b := range backlog {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(b.Count), b.AggregateType, b.Status)
		if b.Status == "delayed" {
			ch <- prometheus.MustNewConstMetric(c.nextDue, prometheus.GaugeValue, b.NextDue.Seconds(), b.AggregateType)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, b.OldestAge.Seconds(), b.AggregateType, b.Status)
	}
	var size int64
	if err == nil {
		size, err = relaydb.TableBytes(ctx, c.pool)
	}
	var health relaydb.TableHealth
	if err == nil {
		health, err = relaydb.ReadTableHealth(ctx, c.pool)
	}
	var retention relaydb.RetentionRecord
	if err == nil {
		retention, err = relaydb.ReadRetention(ctx, c.pool)
	}
	if err != nil {
		failed = 1
	} else {
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(size))
		ch <- prometheus.MustNewConstMetric(c.liveRows, prometheus.GaugeValue, float64(health.LiveRows))
		ch <- prometheus.MustNewConstMetric(c.deadRows, prometheus.GaugeValue, float64(health.DeadRows))
		for name, n := range health.IndexBytes {
			ch <- prometheus.MustNewConstMetric(c.indexBytes, prometheus.GaugeValue, float64(n), name)
		}
		ch <- prometheus.MustNewConstMetric(c.retentionSuccess, prometheus.GaugeValue, float64(retention.LastSuccess.UnixNano())/1e9)
		if retention.Overdue != nil {
			ch <- prometheus.MustNewConstMetric(c.overdue, prometheus.GaugeValue, float64(*retention.Overdue))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.errDesc, prometheus.GaugeValue, failed)
}

// register registers every collector on reg, stopping at the first refusal.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metric: %w", err)
		}
	}
	return nil
}
