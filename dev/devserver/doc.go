// Package devserver runs an embedded Temporal server (SQLite persistence) and,
// optionally, the Temporal Web UI in the current process.
//
// It exists for `ferry dev` and for Ferry's end-to-end tests: both need a real
// Temporal frontend without a separately installed cluster. It owns the
// server's configuration, its SQLite file and the namespaces and search
// attributes it pre-registers. It does not own any Ferry logic, and it is never
// used when Ferry is pointed at a real cluster by address.
//
// The server's internal services listen on ports picked at start; the
// server binds them itself, so another process can take one in between:
// Start then picks new ones. Whatever the server reports as fatal while it
// starts is returned by Start, whether or not its log goes to a file; a
// fatal error once it runs is logged and written to stderr, and the server
// carries on (it recovers from the one seen after a restart).
//
// A restart on the same SQLite file first forgets the cluster members the
// last run left on record whose ports nobody listens on: the server would
// otherwise try to join them for ~50 s before moving any workflow.
package devserver
