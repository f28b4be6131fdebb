// Package payprovider is a sandbox payment provider: an HTTP server with
// Stripe-style idempotency, for `ferry dev` and tests.
//
// Every POST needs an Idempotency-Key header. The first request with a key
// stores its response; a later request with the same key and the same
// parameters gets that response again (header Idempotent-Replayed: true),
// one with other parameters gets 422, and one while the first is still
// being processed gets 409. Validation failures (400) and 429s store
// nothing, so the key stays unused. Keys expire after Config.KeyTTL (24h by
// default), after which the same key charges again: exactly the danger
// reconciliation must beat.
//
// Endpoints: POST /v1/charges {amount, currency, reference, description};
// POST /v1/refunds {charge, amount}; GET /v1/charges?idempotency_key=K or
// ?reference=R and GET /v1/refunds?idempotency_key=K (409 while the key is
// in flight); GET /v1/ledger, everything recorded.
//
// Faults (Config.Faults) are injected per request: 429, a dropped
// connection before anything is recorded, and after the charge is
// committed: a response slower than the client's timeout, a 500, a dropped
// connection; or a stall that keeps the key in flight.
//
// server.go holds the configuration, the ledger and Start/Stop; api.go the
// HTTP endpoints, idempotency by key and fault injection.
package payprovider
