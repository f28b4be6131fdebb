// Command ferry-bench-temporal is the embedded Temporal server (package
// devserver) as `ferry dev` runs it — SQLite file, Ferry's search
// attributes — without the UI, on a free port, until SIGTERM. ferry-bench
// starts it so that the server is a process of its own, measured apart
// from Ferry; it prints bench.TemporalReady and the frontend's address
// once the server answers. With bench.TemporalMetricsEnv set it also
// serves the server's own metrics (Prometheus text, /metrics) there, which
// the bench reads for the cost of each run. With FERRY_BENCH_TEMPORAL_PPROF
// (host:port) it serves net/http/pprof, for profiling the server under a
// workload.
package main
