// Package delivery is the seam between Ferry's publish paths and where an
// event goes: the aggregate workflow's activities and the publish-first
// lane's relay both hand an outbox row to a Target, which sends it and
// says how far the receiving side confirmed it.
//
// RabbitMQ is the Target this package implements (RabbitMQ): the row
// becomes an AMQP message with the event id as message id, Ferry's
// headers beside the producer's, persistent delivery, mandatory and a
// publisher confirm, so that a consumer cannot tell which path sent it.
// The routing key comes from a template (RoutingKeyTemplate).
//
// It does not own the rows: loading them and marking them published is
// the caller's (package relaydb holds the statements), and so is what a
// failure means (an activity retries it, the lane hands the aggregate to
// its workflow). The errors a Target returns are package broker's
// sentinels, which both callers classify.
package delivery
