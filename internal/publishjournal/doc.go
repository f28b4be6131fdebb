// Package publishjournal records, for Ferry's own fault tests, every
// publish made under an ownership epoch of the publish-first lane: which
// aggregate and versions, under which epoch, by which party (a relay's
// name, or the workflow run), when the send began and when its confirm (or
// its failure) came back. The fault suite's checker (dev/e2e) reads the
// journal after a run and asserts that no two owners' publishes of one
// aggregate overlap in time: the lane's invariant that at most one party
// publishes an aggregate at any moment, which the messages alone cannot
// show.
//
// The journal exists only in builds with the failpoints tag (like package
// failpoint; the Makefile's e2e runs set it), and there only when the
// environment variable FERRY_PUBLISH_JOURNAL is true at the process's first
// publish. It then writes to the table ferry_publish_journal of the
// publishing pool's schema (CreateTable makes it), and to nothing in a
// schema without that table. Without the tag the hooks are empty
// functions the compiler inlines away, and the variable is never read: no
// production binary writes a journal.
//
// The hooks are one line each, where a publish happens:
//
//	defer publishjournal.Relay(ctx, pool, relay, aggType, aggID, first, last, epoch, claimedAt.Add(lease)).End(&err)
//	defer publishjournal.Run(ctx, pool, aggType, aggID, first, last, epoch).End(&err)
//
// Relay and Run write the row (the start) before they return, so a
// publisher killed mid-publish leaves a row without an end; End fills in
// the end when the publish is over. A row's bound is the latest moment its
// publish may last by the lane's rules: the claim plus the lease for a
// relay (another relay may take the aggregate over then), the attempt's
// deadline for a workflow run's activity (Temporal retries it then). The
// checker takes a row without an end to have lasted until its bound.
//
// The package owns the journal's table and its rows, nothing else: it
// never changes what a publisher does (a row it cannot write is reported on
// stderr, and the publish goes on).
package publishjournal
