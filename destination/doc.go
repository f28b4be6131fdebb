// Package destination delivers committed outbox events to Temporal
// workflows of your own: it starts a workflow, signals one, or
// signals-with-start one, from inside Ferry's publish activities, so a
// workflow start is as durable as the business rows it was committed with.
//
// It owns four things:
//
//   - the route syntax and its validation (Parse, NewRouter): which event
//     types go to which workflows, under which workflow ID template;
//   - the Envelope, the documented, versioned input every destination
//     receives (Go type and JSON shape, readable from any Temporal SDK);
//   - Dedup, the helper a receiving Go workflow keeps to drop a repeat;
//   - delivery: Sender starts or signals one workflow, and Target, a
//     delivery.Target beside the RabbitMQ one, sends an event to every
//     destination of its type (the publish activities call it).
//
// Delivery is at-least-once from Ferry's side and exactly-once as far as
// Temporal can tell: a start uses a workflow ID derived from the event (a
// repeat finds the workflow there and is a no-op), and a signal carries a
// request id derived from the event id and the destination's name, which
// the Temporal server drops when it sees it again in the same run. A
// repeat that reaches a new run (after continue-as-new) is what Dedup is
// for: it drops any event at or below the version already seen for its
// aggregate, since Ferry delivers each aggregate's versions in order.
//
// The package does not own retries, quarantine or the aggregate's order:
// the aggregate workflow and its publish activities (packages workflows,
// activities) run a destination where they publish to RabbitMQ, with the
// same retry policy, quarantine and repair.
package destination
