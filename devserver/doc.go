// Package devserver runs an embedded Temporal server (SQLite persistence) and,
// optionally, the Temporal Web UI in the current process.
//
// It exists for `ferry dev` and for Ferry's end-to-end tests: both need a real
// Temporal frontend without a separately installed cluster. It owns the
// server's configuration, its SQLite file and the namespaces and search
// attributes it pre-registers. It does not own any Ferry logic, and it is never
// used when Ferry is pointed at a real cluster by address.
package devserver
