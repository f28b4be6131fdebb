// Package payment is the HTTP client of a Stripe-style payment API and the
// activities of the Payment effect workflow (package effects).
//
// Every create request carries an Idempotency-Key. The client sorts what
// comes back into outcome classes (Class): succeeded; declined and invalid
// (permanent); not sent (nothing left this process: safe to retry); unknown
// (timeout after sending, 5xx, connection reset mid-response: the provider
// may have processed it); in progress (409) and rate limited (429), both
// waits; and key mismatch (422), a bug. The activities turn those into the
// workflow's outcomes and retryable or non-retryable errors; the workflow
// reconciles unknown outcomes.
//
// The package owns the wire format of the provider's API and the reading
// of the event payload that a charge is made from. It does not own retries
// (the workflow's activity options) nor the provider (internal/sandbox/payprovider
// for local runs).
package payment
