// Package broker publishes Ferry's events to RabbitMQ with publisher
// confirms.
//
// A Publish returns nil only after the broker confirmed the message: it was
// routed to at least one queue (mandatory; an unroutable message comes back as
// ErrUnroutable) and, for durable queues, written to disk. Messages are
// persistent and carry the event id as message_id, so consumers can
// deduplicate. The Publisher dials lazily and redials after any connection
// failure, so a broker restart costs the failed publishes one retry. A
// channel exception (the broker refusing one message, 406) costs only a new
// channel on the same connection.
//
// A message body over Config.MaxMessageBytes is refused before it is sent
// (ErrTooLarge). When the broker itself closes the channel for a message,
// the error carries its reason as the broker wrote it ("406
// PRECONDITION_FAILED - message size … is larger than configured max size
// …") and names the refused message (ErrRefused); the other messages in
// flight on that channel fail with ErrUnavailable.
//
// The package owns the AMQP connection, its channel and the exchange
// declaration. It does not own retries (the caller's, i.e. Temporal's retry
// policy) or queues (consumers declare and bind their own).
package broker
