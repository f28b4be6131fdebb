// Package workflows holds Ferry's aggregate workflow and its wire contract:
// the registered names, signal name and payload types that the poller, the
// worker and operators' tooling share.
//
// One workflow runs per aggregate (ID "ferry/<aggregate_type>/<aggregate_id>").
// It receives references to committed outbox events by signal, orders them by
// aggregate_version, drops duplicates, and runs the publish activity for each
// event strictly in order. It continues-as-new before its history grows large
// and completes when idle; the next run resumes from the delivered version
// stored in PostgreSQL.
//
// After publishing an event it starts the effect workflows that the worker's
// routes attach to the event's type (effects.go; the workflows themselves
// are in package effects), each under an ID derived from the event id and
// the effect name, so a repeated event starts none twice.
//
// The package owns ordering and deduplication. It does no I/O: payloads stay in
// PostgreSQL and are read by the activities (package activities).
//
// Everything named here is a wire contract with running workflows and
// recorded histories: change behaviour only behind workflow.GetVersion and
// never rename a registered name.
package workflows
