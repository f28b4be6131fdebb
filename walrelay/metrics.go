package walrelay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// NewSlotCollector returns a collector of the slot's state, read from
// pg_replication_slots at scrape time: ferry_wal_slot_retained_bytes (WAL
// kept on disk for the slot: what a stalled or dropped-out relay costs),
// ferry_wal_slot_lag_bytes (WAL written since the relay last confirmed),
// ferry_wal_slot_active (1 while a relay streams from it) and
// ferry_wal_slot_exists.
func NewSlotCollector(pool *pgxpool.Pool, slot string) prometheus.Collector {
	labels := prometheus.Labels{"slot": slot}
	return &slotCollector{
		pool: pool, slot: slot,
		retained: prometheus.NewDesc("ferry_wal_slot_retained_bytes", "WAL PostgreSQL keeps for Ferry's replication slot (current WAL position minus restart_lsn).", nil, labels),
		lag:      prometheus.NewDesc("ferry_wal_slot_lag_bytes", "WAL written since the WAL relay last confirmed (current WAL position minus confirmed_flush_lsn).", nil, labels),
		active:   prometheus.NewDesc("ferry_wal_slot_active", "1 while a WAL relay streams from the slot.", nil, labels),
		exists:   prometheus.NewDesc("ferry_wal_slot_exists", "1 when the slot exists; 0 when it was dropped.", nil, labels),
		errDesc:  prometheus.NewDesc("ferry_wal_slot_scrape_error", "1 when reading pg_replication_slots for this scrape failed.", nil, labels),
	}
}

type slotCollector struct {
	pool                                   *pgxpool.Pool
	slot                                   string
	retained, lag, active, exists, errDesc *prometheus.Desc
}

func (c *slotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.retained, c.lag, c.active, c.exists, c.errDesc} {
		ch <- d
	}
}

func (c *slotCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := ReadSlotStats(ctx, c.pool, c.slot)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.errDesc, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.errDesc, prometheus.GaugeValue, 0)
	ch <- prometheus.MustNewConstMetric(c.exists, prometheus.GaugeValue, boolf(s.Exists))
	if !s.Exists {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, boolf(s.Active))
	ch <- prometheus.MustNewConstMetric(c.retained, prometheus.GaugeValue, float64(s.RetainedBytes))
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(s.LagBytes))
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
