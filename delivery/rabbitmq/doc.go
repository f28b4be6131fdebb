// Package rabbitmq is the delivery.Target of Ferry's message contract on
// RabbitMQ (docs/consuming.md): an outbox row becomes an AMQP message with
// the event id as message id, Ferry's headers beside the producer's,
// persistent delivery, mandatory and a publisher confirm, so that a
// consumer cannot tell which publish path (the aggregate workflow's
// activities, the publish-first lane) sent it. The routing key comes from
// a template (RoutingKeyTemplate).
//
// It keeps the AMQP types behind the seam: the message's header table is
// built here and sent by package broker, which owns the connection, the
// channel and the confirms; broker's errors come back in delivery's
// classes, with broker's message.
//
// It does not own the rows (loading and marking them is the caller's) or
// what a failure means (an activity retries it, the lane hands the
// aggregate to its workflow).
package rabbitmq
