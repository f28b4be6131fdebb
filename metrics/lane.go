package metrics

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-outbox/ferry/relaydb"
)

// laneCollector reads who owns aggregates at scrape time (the
// publish-first lane's outbox_owners, which holds only the aggregates
// owned right now: a small table).
type laneCollector struct {
	pool     *pgxpool.Pool
	workflow *prometheus.Desc
	oldest   *prometheus.Desc
	relay    *prometheus.Desc
}

// NewLaneCollector returns a collector of ferry_lane_workflow_aggregates
// (aggregates their workflows own now: handed over by the publish-first
// lane and not yet released), ferry_lane_workflow_oldest_seconds (how long
// the longest-held one has been) and ferry_lane_relay_aggregates
// (aggregates a relay is publishing directly: live leases). All are 0 in
// the workflow lane. A failed read emits nothing and sets
// ferry_outbox_scrape_error through the outbox collector's own read.
func NewLaneCollector(pool *pgxpool.Pool) prometheus.Collector {
	return &laneCollector{
		pool:     pool,
		workflow: prometheus.NewDesc("ferry_lane_workflow_aggregates", "Aggregates their workflows own now (the publish-first lane handed them over: a failed publish, an event that needs the workflow, a repair) and have not released.", nil, nil),
		oldest:   prometheus.NewDesc("ferry_lane_workflow_oldest_seconds", "How long the aggregate owned longest by its workflow has been owned (0: none).", nil, nil),
		relay:    prometheus.NewDesc("ferry_lane_relay_aggregates", "Aggregates a relay of the publish-first lane is publishing directly right now (live leases).", nil, nil),
	}
}

func (c *laneCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.workflow
	ch <- c.oldest
	ch <- c.relay
}

func (c *laneCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := relaydb.ReadLaneCounts(ctx, c.pool)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.workflow, prometheus.GaugeValue, float64(n.Workflow))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, n.OldestWorkflow.Seconds())
	ch <- prometheus.MustNewConstMetric(c.relay, prometheus.GaugeValue, float64(n.Relay))
}
