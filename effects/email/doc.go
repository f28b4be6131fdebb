// Package email sends the Email effect's messages over SMTP
// (emersion/go-smtp's client) with a sent-ledger in PostgreSQL
// (ferry_email_ledger, schema migration 0003).
//
// SMTP has no idempotency key. Each message carries a Message-ID derived
// from the effect's idempotency key, and the ledger row of that key says
// whether the message was accepted: a retry after a confirmed send (250 to
// the final ".") sends nothing. A transaction whose connection drops after
// the final "." (RFC 1047), or whose worker dies mid-send, is ambiguous:
// the server may have accepted it. Config.Ambiguous decides: "resend"
// (default) sends again with the same Message-ID, so at most one duplicate
// per ambiguous transaction reaches the recipient, who can collapse it by
// Message-ID; "park" blocks the workflow for an operator. Both count in
// ferry_effect_email_ambiguous_total.
//
// The package owns the ledger's SQL, the rendering of templates from the
// event payload and the SMTP transaction. It does not own retries (the
// Email workflow's activity options).
package email
