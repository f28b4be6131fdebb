// Package metrics exposes Ferry's Prometheus metrics: counters that Ferry's
// components increment, a collector that reads the outbox's state from
// PostgreSQL at scrape time, and the /metrics HTTP server.
//
// It owns metric names and labels (a contract with dashboards and alerts:
// never rename) and the HTTP listener. It does not own the pool it reads
// with.
package metrics
