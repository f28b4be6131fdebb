// Package telemetry holds Ferry's OpenTelemetry plumbing: Temporal's
// tracing interceptor, and the rule that joins an outbox row's stored trace
// context to the spans around its delivery. The ferry binary's trace
// exporter is the command's (cmd/ferry/internal/tracing). It also bridges the Temporal SDK's own
// metrics to a Prometheus registry (TemporalMetrics); Ferry's own metrics
// are not its business.
//
// It starts no spans of its own: the poller (ferry.dispatch), the publish
// activity (ferry.publish), the consumer (ferry.consume) and Temporal's
// interceptor (workflow and activity spans) start theirs. It owns no
// connection.
package telemetry
