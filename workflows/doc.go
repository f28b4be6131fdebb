// Package workflows holds Ferry's aggregate workflow and its wire contract:
// the registered names, signal name and payload types that the poller, the
// worker and operators' tooling share.
//
// One workflow runs per aggregate (ID "ferry/<aggregate_type>/<aggregate_id>",
// escaped for an id outside printable ASCII: WorkflowID).
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
// # Settings
//
// The workflow's settings (Settings: idle timeout, history length, batch
// size, blocked-reference bound, policies by event type) are the worker's
// (worker.Config.Workflow). A run of Revision2 or later asks the worker
// that runs it at its start, in the result of its first activity: a fresh
// run in its first PublishBatchActivity (which also reads the cursor) or,
// when that fails, in LoadCursorActivity; a run continued as new in a
// LoadCursorActivity before anything else. It keeps the answer to its end,
// so a changed setting reaches a running aggregate at its next run or
// continue-as-new. Activity results are recorded in history, so a replay
// sees the settings the run was given, and the question costs no state
// transition: it rides on a local activity the run makes anyway. Runs of
// older revisions read the same settings from their input (put there by
// the poller that started them) and keep them across continue-as-new.
//
// # Versioning
//
// Everything named here is a wire contract with running workflows and
// recorded histories: never rename a registered name, and never change
// what a recorded history replays to. A behaviour change is chosen in one
// of two ways, each a pure function of what the history already holds:
//
//   - the run's input, chosen by the starter and kept across
//     continue-as-new: its Revision (pollers start new runs with
//     CurrentRevision; Revision1: the cursor read in the first batch,
//     effects without a marker; Revision2: settings from the worker, one
//     idle timer), and for older runs the fields that switched behaviour
//     on (PublishBatchSize for the fast path, OneShot, MaxBlockedRefs).
//     The workflow branches on them with no command of its own.
//     Revisions are only ever added;
//   - workflow.GetVersion, where a change must reach runs already in
//     flight whatever their revision: effect starts in runs before
//     Revision1 (EffectsChangeID), repairs by error class and the
//     rejection memo (aggregate_repair.go). Its marker upserts the
//     TemporalChangeVersion search attribute, a visibility write per run,
//     which is why the per-run path uses the revision instead.
//
// Every recorded history in testdata replays in the tests, and the
// replayer fails on a changed workflow (TestReplayDetectsChangedWorkflow).
// The per-aggregate workflow is split by responsibility: aggregate.go (the
// main loop, the idle wait, continue-as-new), aggregate_publish.go (cursor,
// settings, fast and regular path), aggregate_block.go (quarantine and
// blocking) and aggregate_repair.go (repairs).
package workflows
