// Package app wires Ferry's components into a process: it turns one Config
// (flags, environment) into a PostgreSQL pool, a Temporal client, a RabbitMQ
// publisher and the poller and/or worker, with fx.
//
// It owns connection set-up and the messages a person sees when a dependency
// is unreachable. It owns no relay or delivery logic.
package app
