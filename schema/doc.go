// Package schema owns Ferry's PostgreSQL schema: the numbered SQL migrations
// embedded in the binary and the code that applies them.
//
// The same bytes are applied by `ferry migrate`, by `ferry dev` and by the
// tests. Migrate is idempotent and safe when several processes run it at once
// (an advisory lock per schema serialises them). The package does not own
// connections: callers pass a pool and keep it.
package schema
