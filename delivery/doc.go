// Package delivery is the seam between Ferry's publish paths and where an
// event goes: the aggregate workflow's activities and the publish-first
// lane's relay both hand outbox rows to a Target, which sends them and
// says how far the receiving side confirmed them.
//
// Two implementations are in the tree: Ferry's message contract on
// RabbitMQ (package delivery/rabbitmq, which keeps the AMQP types behind
// it) and the workflows of your own an event type is routed to
// (destination.Target). A deployment without a broker is one with no
// RabbitMQ target; an event that then has no workflow destination either
// goes nowhere, and the activities quarantine it (NoDestination).
//
// It owns the interface, the Event it carries and the classes of a
// broker's failures (ErrUnroutable, ErrNacked, ErrUnavailable,
// ErrTooLarge, ErrRefused), which both callers classify. It does not own
// the rows: loading them and marking them published is the caller's
// (package relaydb holds the statements), and so is what a failure means
// (an activity retries it, the lane hands the aggregate to its workflow).
package delivery
