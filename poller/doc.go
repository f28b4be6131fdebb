// Package poller is Ferry's relay from PostgreSQL to Temporal.
//
// It claims committed, pending outbox rows (FOR UPDATE SKIP LOCKED plus a
// lease, counting the attempt at claim time, oldest first: never a "last seen
// id" cursor, since commit order is not id order), groups them per aggregate
// and signals-with-start one workflow per aggregate. A row is marked
// dispatched only after Temporal accepted the signal; a crash in between
// re-signals after the lease, and the workflow drops the duplicate.
//
// It wakes on LISTEN/NOTIFY over a dedicated connection and polls as a
// fallback. Several pollers may run at once. It owns no business logic and
// no delivery: it does not touch RabbitMQ.
//
// Files: poller.go (Config, Start/Stop, the loop), claim.go (the claim SQL,
// RunOnce, quarantine of refused rows), dispatch.go (grouping per aggregate,
// Dispatch), start.go (one-shot start and Signal-With-Start), listen.go
// (LISTEN/NOTIFY wake-ups).
package poller
