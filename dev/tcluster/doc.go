// Package tcluster lays out Temporal as a cluster of processes on one
// PostgreSQL, the local stand-in for a real cluster: a frontend process
// (the frontend, matching and the internal worker) and history processes
// that share the history shards, each started as `ferry dev temporal
// --services … --ports …` on fixed ports, so that any of them can be
// killed and started again as it was. The end-to-end tests (dev/e2e) and
// the benchmark (dev/bench) both start their clusters from this layout.
//
// It owns the ports, the command line of each process and the line a
// process prints once it serves. It does not own the processes (tests and
// the bench start and kill them their own way) nor the databases: the
// frontend process creates and upgrades them at its first start, and the
// caller drops them.
package tcluster
