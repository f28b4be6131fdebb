// Package testenv gives tests real, isolated infrastructure: a fresh
// PostgreSQL schema (migrated with the embedded migrations) per test, and a
// unique RabbitMQ exchange and queue per test.
//
// A test that needs a service fails, never skips, when the service is
// missing: the message says how to start it. Addresses come from
// FERRY_TEST_POSTGRES_URL and FERRY_TEST_AMQP_URL, defaulting to this
// machine's local services.
package testenv
