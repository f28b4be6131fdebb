// Package worker hosts Ferry's aggregate workflow and its activities on a
// Temporal task queue.
//
// It owns the Temporal worker's options (task queue, concurrency, panic
// policy) and the registration under the wire names of package workflows. It
// does not own the Temporal client, the PostgreSQL pool or the broker
// connection: they come in through Config.
package worker
