// Package ferry is a transactional outbox for Go services that hands
// delivery to Temporal: events committed to PostgreSQL together with the
// business rows reach RabbitMQ at least once, in order per aggregate.
//
// The pieces live in their own packages: outbox (the producer API used in a
// service's transaction), schema (migrations), poller (PostgreSQL →
// Temporal), workflows and activities (Temporal → RabbitMQ), worker (hosts
// them), broker (RabbitMQ publishing).
//
// This package is the way to embed the relay in a service of your own: the
// fx modules Poller, Worker, Postgres and Temporal (module.go), and New for
// services without fx (relay.go). It owns no connection it was lent (Deps)
// and runs no migration: `ferry migrate` or schema.Migrate does. See
// README.md for the guarantees, the schema contract and the configuration.
package ferry
