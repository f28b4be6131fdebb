// Package metrics is the Prometheus side of Ferry's relay and consumers:
// the counters behind the components' small Metrics interfaces (poller.Metrics
// is met by *Relay, consumer.Metrics and inbox.CleanerMetrics by *Consumer;
// *Metrics and *Maintenance count quarantines, repairs and maintenance), a
// collector that reads the outbox's backlog at scrape time through package
// relaydb's queries, and, apart from all of them (server.go), the /metrics
// HTTP server for a process without a registry of its own.
//
// The effect activities define their own counters (effects/email,
// effects/payment) and register them on Metrics.Registerer.
//
// It owns metric names and labels (a contract with dashboards and alerts:
// never rename) and the HTTP listener. It runs no SQL and does not own the
// pool the collector reads with.
package metrics
