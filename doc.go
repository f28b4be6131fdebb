// Package ferry is a transactional outbox for Go services that hands
// delivery to Temporal: events committed to PostgreSQL together with the
// business rows reach RabbitMQ at least once, in order per aggregate.
//
// The pieces live in their own packages: outbox (the producer API used in a
// service's transaction), schema (migrations), poller (PostgreSQL →
// Temporal), workflows and activities (Temporal → RabbitMQ), worker (hosts
// them), broker (RabbitMQ publishing), relaydb and repairdb (the relay's
// and the repairs' SQL on the outbox tables).
//
// This package is the way to embed the relay in a service of your own: the
// fx modules Poller, Worker, Metrics, Postgres and Temporal (module.go), and
// New for services without fx (relay.go). Each takes the config of what it
// builds (config.go, connections.go): Config for the poller and the worker,
// PostgresConfig and TemporalConfig for the connections. Zero fields take
// the defaults their comments state; WithDefaults checks values without
// reading a file and names the field in its errors (*FieldError). The ferry
// binary's own settings (its /metrics listener, trace exporter, key file)
// are on none of them. It owns no connection it was lent (Deps) and runs no
// migration: `ferry migrate` or schema.Migrate does. See README.md for the
// guarantees and docs/configuration.md for every setting.
package ferry
