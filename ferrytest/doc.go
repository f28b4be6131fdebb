// Package ferrytest is the kit for testing a service that embeds Ferry,
// against real services: a PostgreSQL schema per test with Ferry's tables
// (NewDB), a RabbitMQ exchange and queue per test (NewBroker), assertions
// on the outbox events a transaction wrote (RequireWritten,
// RequireManyWritten), and a wait until given events are published
// (WaitPublished). Package relaytest runs Ferry's relay in the test's
// process against the test's PostgreSQL, RabbitMQ and a Temporal server
// the test provides; package servers runs what fault tests break (private
// PostgreSQL and RabbitMQ instances, proxies, certificates).
//
// A test asserts what its handler's transaction wrote, before or after
// the commit:
//
//	db := ferrytest.NewDB(t, "")
//	tx, _ := db.Pool.Begin(ctx)
//	_ = svc.PlaceOrder(ctx, tx, order) // business rows and outbox.Writer.Write
//	ferrytest.RequireWritten(ctx, t, tx, ferrytest.Expected{
//		AggregateType: "order", AggregateID: order.ID, EventType: "placed",
//		Payload: `{"total_cents": 4200}`,
//	})
//
// and runs the relay to see the event published:
//
//	br := ferrytest.NewBroker(t, "")
//	relaytest.Start(t, relaytest.Config{DB: db, Broker: br, Temporal: temporalClient})
//	ferrytest.WaitPublished(t, db.Pool, 30*time.Second, written.ID)
//
// The Temporal server is the test's: Temporal's development server, one
// embedded in a test binary, or none at all for the publish-first lane
// (Config.Lane poller.LanePublishFirst, Roles{Poller: true}), which
// publishes without a workflow unless a publish fails: UnreachableTemporal
// is a client for that case, which fails every call.
//
// Besides, it reads Ferry's metrics off a prometheus.Gatherer (Sample,
// Series, HasMetric) and captures concurrent output (Buffer).
//
// A helper that needs a service fails the test, never skips it, when the
// service does not answer; the message says which address it tried. An
// empty URL means FERRY_TEST_POSTGRES_URL or FERRY_TEST_AMQP_URL, else
// this machine's local services (PostgresURL, AMQPURL). The failures of
// the assertions say what differed: the field, what was expected and what
// was written.
//
// It owns no production code path: its SQL reads the outbox tables as a
// test sees them, and what it sets up is removed at the test's cleanup.
package ferrytest
