// Package servers runs what a fault test breaks and what a TLS test
// needs, each of one test's own and removed at its cleanup: a PostgreSQL
// cluster it may stop and crash (StartPrivatePostgres, with
// wal_level=logical), a RabbitMQ node with settings of its own that it may
// stop and restart (StartRabbitNode), a TCP proxy that drops, pauses and
// stalls connections (NewProxy), and a certificate authority with server
// and client certificates and a TLS-terminating proxy (NewPKI).
//
// They fail the test, never skip it, when the binaries they run are
// missing, saying which. The shared services, one schema and one exchange
// per test, are package ferrytest's (NewDB, NewBroker); a private cluster
// takes a schema the same way: ferrytest.NewDB(t, pg.URL).
package servers
