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
// The exported surface is what producers use: Writer (Write, WriteBatch,
// Validate), Event, Config, the validation rules and their helpers
// (ValidatePayload, ValidateHeaders, CheckHeaderName, ReservedHeader, the
// limits) and the errors. The relay's statements on the same tables are
// package relaydb's, repairs and their audit package repairdb's.
package outbox
