// Package effects runs external side effects of outbox events (charging a
// card, sending an e-mail) as Temporal workflows with stable idempotency
// keys, and routes event types to them.
//
// The aggregate workflow (package workflows) publishes an event, then starts
// one child workflow per effect that the Router attaches to the event's
// type, with the ID workflows.EffectWorkflowID(effect, event id) and
// ParentClosePolicy ABANDON. A repeat of the event finds the ID taken and
// starts nothing.
//
// Every idempotency key an effect sends is IdempotencyKey(effect, event id,
// step): never a run id, so it survives activity retries, continue-as-new,
// reset and replay.
//
// The package owns the routing, the keys, the built-in Payment and Email
// workflows and their wire contract (registered names, inputs, results,
// query and signal). It does no I/O: the activities live with their
// clients in effects/payment (HTTP, Stripe-style) and effects/email (SMTP
// with a sent-ledger in PostgreSQL). Users write more effects the same way:
// a workflow taking workflows.EffectInput, registered under a name given to
// the Router as a Kind.
package effects
