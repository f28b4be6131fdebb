// Package worker hosts Ferry's aggregate workflow and its activities on a
// Temporal task queue.
//
// It owns the Temporal worker's options (task queue, concurrency, panic
// policy), the registration under the wire names of package workflows, and
// the aggregate workflow's settings (Config.Workflow: idle timeout, history
// length, batch size, blocked-reference bound, policies), which it hands to
// every run of workflows.Revision2 or later at the run's start. It
// does not own the Temporal client, the PostgreSQL pool or the broker
// connection: they come in through Config.
package worker
