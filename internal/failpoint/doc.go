// Package failpoint lets tests stop a Ferry process at a named point of its
// work, deterministically, instead of hoping a SIGKILL lands at the worst
// moment.
//
// A failpoint is one call, Inject(name), at a point where a crash matters.
// It does something only in a build with the failpoints tag
// (go test -tags failpoints; the Makefile's test targets set it), and there
// only when the environment variable FERRY_FAILPOINTS is set when the
// process starts. Without the tag Inject is an empty function the compiler
// inlines away and the variable is never read: no production binary can
// be stopped by it.
//
//	FERRY_FAILPOINTS="poller.after-claim=exit@3,worker.after-confirm=exit"
//
// Each entry is name=action[@n]; the action runs on the n-th time the
// point is reached (default the first) and only then. Actions:
//
//	exit         the process SIGKILLs itself: no deferred cleanup, no flush,
//	             no goodbye to PostgreSQL, RabbitMQ or Temporal, as when the
//	             machine dies. One line naming the failpoint goes to stderr
//	             first, so a test can tell its crash from any other.
//	sleep(DUR)   the caller stalls for DUR (a Go duration, e.g. sleep(2s)).
//
// A malformed FERRY_FAILPOINTS panics at the first Inject: a typo must not
// turn a fault test into a test of nothing. Unknown names are allowed (they
// may belong to another process).
//
// The points (see docs/fault-tolerance.md):
//
//	poller.after-claim     poller: a batch is claimed (lease taken, attempts
//	                       counted); no aggregate has been signalled yet.
//	poller.after-signal    poller: Temporal accepted the batch's signals; the
//	                       rows are not yet marked dispatched.
//	worker.after-confirm   publish activity: RabbitMQ confirmed the message;
//	                       the row is not yet marked published.
//	lane.after-claim       publish-first lane: a direct claim took the
//	                       aggregates' ownership and leased their rows;
//	                       nothing is published yet.
//	lane.after-confirm     publish-first lane: RabbitMQ confirmed the batch's
//	                       publishes; nothing is marked and no aggregate
//	                       given up yet.
//	consumer.before-commit e2e checker consumer: the handler wrote its effect
//	                       in the inbox transaction, which is not committed.
//	consumer.after-commit  e2e checker consumer: the inbox transaction
//	                       committed; the delivery is not yet acknowledged.
//
// The package owns nothing else: it never decides where points go (their
// packages do, one line each) and it has no API to enable points at run
// time. Enabled says whether this build has them, so a test that needs a
// failpoint can fail with a clear message when built without the tag.
package failpoint
