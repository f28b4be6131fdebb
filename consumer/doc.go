// Package consumer runs an inbox.Handler against a RabbitMQ queue fed by
// Ferry: manual acknowledgements, a prefetch window, reconnection with
// backoff, and a graceful Stop that finishes the deliveries in hand.
//
// Every delivery goes through the same steps. Its Ferry headers are read
// (message_id, type, and the broker.Header* contract), and the producer's
// own string headers go to the handler in inbox.Event.Headers; its payload
// is lifted to the handler's schema version by an upcast.Registry;
// inbox.Process applies it in one PostgreSQL transaction; OnResult
// observes the outcome; and only then is it acknowledged. The ordering policy:
//
//   - applied, duplicate (event id seen), stale (version ≤ last applied):
//     acknowledged; the last two had no effect and are counted.
//   - gap (version > last applied + 1): a copy goes to <queue>.retry, which
//     returns it to the queue after GapRetryDelay, and the original is
//     acknowledged. An event still gapped GapTimeout after it was first
//     seen is parked in <queue>.dlq with the reason in its headers.
//   - invalid headers or schema version: quarantined in <queue>.dlq at once,
//     with the reason in its headers and an error log line.
//   - handler error: returned to the queue after a backoff; on its last
//     delivery (DeliveryLimit) it is parked in <queue>.dlq with the
//     handler's error. A message that crashes the consumer every time is
//     dead-lettered there by the broker (x-death reason delivery_limit).
//   - PostgreSQL unreachable: retried in place with backoff, without
//     returning the message, so an outage parks nothing.
//
// Deliveries of one aggregate are handled one after another in arrival
// order; different aggregates run on Concurrency workers.
//
// The package owns its queue topology (declared durable, quorum, with a
// dead-letter exchange and a delivery limit) and its AMQP connection. It does
// not own the inbox tables (package inbox), payload schemas (package upcast)
// or the exchange's contents (Ferry's relay).
//
// Files: consumer.go (Config, New, Start/Stop, the public types), run.go
// (the connect loop and the workers), session.go (connection, channel and
// topology), handle.go (one delivery through the ordering policy).
package consumer
