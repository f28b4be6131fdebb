// Package relaydb holds the relay's SQL on the outbox tables (outbox_events,
// outbox_aggregates, and the publish-first lane's outbox_owners and
// ferry_relays): the statements the delivery side runs after a producer
// committed its rows, each a named constant with the reason for its shape.
//
//   - deliver.go: what the aggregate workflow's activities read, mark and
//     hand back (LoadManyForPublish, MarkBatchPublished, Quarantine, Hold),
//     and what the scheduled maintenance deletes, re-dispatches and
//     checks (DeleteDelivered, StuckAggregates, RedispatchAggregate);
//   - owners.go: the lane's ownership as the workflow side sees it, with
//     the fenced marks of a run that owns an aggregate under an epoch
//     (MarkPublishedFenced, HoldFenced, Release, TakeBack);
//   - drift.go: the drift check's reads and the statements its advice
//     spells out;
//   - read.go: the reads of operator commands and metrics (ReadBacklog,
//     DetailByID, Quarantined).
//
// Each function takes the caller's pool or transaction (Queryer, Execer)
// and opens no transaction of its own: several are often steps of one
// transaction of the caller's. Errors of the marks come back as the driver
// returned them; the caller names the operation (those messages are what
// operators read in Temporal's UI) and classifies pgx.ErrNoRows and
// PostgreSQL's codes itself.
//
// It does not own the producer's inserts and their rules (package outbox),
// the poller's claim and lease statements (package poller, which owns that
// protocol), or repairs and their audit (package repairdb).
package relaydb
