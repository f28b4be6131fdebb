// Package activities holds the Temporal activities Ferry's workflows run,
// as methods on one struct per concern, each holding only its
// dependencies:
//
//   - Publish: the aggregate workflow's publish path (PublishEvent,
//     PublishBatch, LoadAggregateCursor): an outbox row read, sent through
//     the delivery targets (RabbitMQ with a confirm: Config.Broker; the
//     event type's workflow destinations: destination.Target), marked
//     published. The last two also answer
//     a run that asks with the worker's workflow settings
//     (workflows.Settings), which Publish.Register binds.
//   - Repair: quarantine, audited repairs (retry, skip, patch), replays of
//     delivered events, and the hand-back and release of the events a
//     blocked run does not keep; RepairUnheld repairs a row no workflow
//     holds.
//   - Maintenance: retention, the reconciler and the drift check, run by
//     schedules.
//
// New builds all three from one Config and Activities.Register registers
// them; the registered names in package workflows are a wire contract.
//
// The package owns the steps and their transactions; the SQL they run is
// package relaydb's (reads, marks, quarantines, purges) and package
// repairdb's (repairs and their audit), and the mapping of an outbox row
// onto an AMQP message is package delivery/rabbitmq's. It does not own retries:
// errors are classified (retryable or not) and the workflow's retry policy
// decides.
package activities
