// Package ferry is a transactional outbox for Go services that hands
// delivery to Temporal: events committed to PostgreSQL together with the
// business rows reach RabbitMQ at least once, in order per aggregate.
//
// The pieces live in their own packages: outbox (the producer API used in a
// service's transaction), schema (migrations), poller (PostgreSQL →
// Temporal), workflows and activities (Temporal → RabbitMQ), worker (hosts
// them), broker (RabbitMQ publishing). This package holds only project-level
// checks; see README.md for the guarantees and the schema contract.
package ferry
