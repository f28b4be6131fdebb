// Package fulfilment is the orders example's own Temporal workflow: one
// Fulfilment run per order, started by Ferry when an order.created row
// commits and signalled by Ferry when the order's order.paid row commits.
// Once paid, it marks the order "fulfilling" in PostgreSQL.
//
// It owns the workflow (Workflow, its query and signal names, its ID), its
// activity (Activities.MarkFulfilling), the Temporal worker that hosts both
// on the example's own task queue (Worker), and the routes that tell Ferry
// where the two event types go (Routes).
//
// It does not own the orders table, the outbox rows or their transactions
// (package orders writes them), nor their delivery: Ferry's publish path
// starts and signals the workflow, with its retries, quarantine and repair
// (package destination).
package fulfilment
