// Package inbox is the consumer half of Ferry's delivery guarantee: it makes
// an at-least-once stream of events take effect once.
//
// For one event, Inbox.Process begins a transaction, records the event in
// inbox_processed_events keyed by (consumer name, event id), checks the
// aggregate version against the last one this consumer applied
// (inbox_aggregates, locked for the rest of the transaction), runs the
// consumer's handler in the same transaction, records the new version and
// commits. The outcome says what the caller acknowledges:
//
//   - Applied: the handler's writes and the inbox rows committed together.
//   - Duplicate: the event id was already recorded; nothing committed.
//   - Stale: a different event with a version at or below the last applied
//     one; nothing committed.
//   - Gap: a version above last applied + 1; nothing committed, and the
//     caller holds or delays the event until the missing version arrives.
//
// A handler error, or a crash before the commit, leaves nothing behind, so a
// redelivery applies the event then. A crash after the commit and before the
// acknowledgement redelivers into the primary key and has no effect.
//
// Cleaner deletes inbox rows older than a retention period in bounded batches,
// one runner at a time. Migrate creates the tables from the embedded files in
// migrations/, with its own bookkeeping table and advisory lock, so the inbox
// may share a database with the outbox or live elsewhere.
//
// The package owns these two tables. It does not own connections (callers
// pass a pool), the broker (package consumer reads RabbitMQ) or payload
// schemas (package upcast).
package inbox
