// Package tracing is the ferry binary's trace exporter: the tracer
// provider of the process and its OTLP exporter (off by default), from the
// process's own settings (--otel-exporter, --otel-endpoint,
// OTEL_SERVICE_NAME). An embedding service has a tracer provider of its
// own and hands it to Ferry (the fx graph, Deps); the library starts spans
// on whatever provider it is given and exports none itself.
//
// It starts no spans and owns no connection but the exporter's, which
// exists only when an exporter is chosen.
package tracing
