// Package sandbox holds local stand-ins for the providers Ferry's built-in
// effects talk to, speaking the real protocols on loopback: payprovider (a
// Stripe-style payment API with faithful idempotency) and smtpsink (an SMTP
// server). Both inject faults on demand and keep a ledger tests can read.
// `ferry dev` runs them; they are not for production.
package sandbox
