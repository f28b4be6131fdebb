// Package relaytest runs Ferry's relay in a test's process (Start): over
// the test's PostgreSQL schema and RabbitMQ exchange (package ferrytest's
// NewDB and NewBroker) and a Temporal server the test provides, on a task
// queue of the test's own, stopped at the test's cleanup. With
// ferrytest.WaitPublished a test sees its events published:
//
//	db, br := ferrytest.NewDB(t, ""), ferrytest.NewBroker(t, "")
//	relaytest.Start(t, relaytest.Config{DB: db, Broker: br, Temporal: temporalClient})
//	ferrytest.WaitPublished(t, db.Pool, 30*time.Second, written.ID)
//
// It is apart from package ferrytest because it builds the relay
// (package ferry), which the tests of Ferry's own packages, using
// ferrytest, must not import.
package relaytest
