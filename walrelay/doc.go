// Package walrelay is Ferry's log-tailing relay from PostgreSQL to Temporal,
// the alternative to the polling relay (package poller).
//
// It reads inserts into outbox_events from a logical replication stream
// (pgoutput, through jackc/pglogrepl) of a publication and a named
// replication slot that it creates, decodes them into the per-aggregate
// groups the poller dispatches, and hands them to Temporal through the
// poller's own dispatch code (poller.Poller.Dispatch): the same one-shot
// starts and Signal-With-Start, the same workflows. It marks the rows
// dispatched as the poller does, and confirms the slot's position only past
// transactions whose every event Temporal accepted, so a crash replays from
// there and the workflow drops the repeats (an aggregate Temporal refuses
// as invalid stays pending for the claim pass instead of holding the
// stream). One claim pass of the polling
// path (poller.Poller.RunOnce) runs at start and on a slow timer: it
// delivers rows that were pending when the slot was created, or inserted
// while the slot was gone. Delayed rows (deliver_after ahead of their
// commit, and the later versions of their aggregates held behind them) are
// never streamed: the claim pass delivers them, and runs when the next
// pending row is due rather than waiting for its timer.
//
// Only one process can read a slot: another waits as a standby and takes
// over when the first one's connection ends.
//
// It owns the slot and the publication (creating them, and DropSlot), and
// the replication connection. It does not own the pool (the caller's), the
// claim, the dispatch or the workflows (package poller and workflows), the
// schema (package schema) or any delivery: it does not touch RabbitMQ.
package walrelay
