// Package migrate applies numbered, embedded SQL migrations to the current
// PostgreSQL schema. It is the engine behind schema.Migrate (the outbox) and
// inbox.Migrate (the consumer side), which keep their own files, their own
// bookkeeping table and their own advisory lock, so both can live in one
// database without stepping on each other.
//
// It owns the bookkeeping table it is given; it does not own connections
// (callers pass a pool and keep it) and it holds no state between calls.
package migrate
