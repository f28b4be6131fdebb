// Package outbox is the producer half of Ferry: it writes outbox events inside
// the caller's PostgreSQL transaction.
//
// A service commits its business rows and its events together:
//
//	tx, _ := pool.Begin(ctx)
//	_, _ = tx.Exec(ctx, `INSERT INTO orders …`)
//	_, err := writer.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: id, EventType: "created", Payload: body})
//	_ = tx.Commit(ctx)
//
// Nothing else happens on the request path: no broker call, no Temporal call.
// The package owns validation, event ids, version assignment (through the
// schema's trigger) and the trace context stored with each row. It does not
// own the transaction (the caller begins and commits it), connections, or
// delivery (see package poller).
//
// It also holds the SQL that others run on its tables (outbox_events,
// outbox_aggregates and the repair audit ferry_repairs), each statement a
// named constant with the reason for its shape: the reads of operator
// commands and metrics (read.go), the delivery side's marks, hand-backs,
// retention and reconciler statements (deliver.go), the drift check's
// reads (drift.go) and the audited repairs (repair.go). Those functions
// take the caller's pool or transaction and open none of their own. The
// poller's claim and lease statements stay in package poller, which owns
// that protocol.
package outbox
