// Package testenv holds the library module's own test helper that no
// other module needs: a wait for a concurrent session to block on a
// transaction (WaitForWaiter).
//
// The shared test infrastructure is public, for embedders and for Ferry's
// other modules alike: a schema and an exchange per test and the
// assertions in package ferrytest, the relay in-process in
// ferrytest/relaytest, private PostgreSQL and RabbitMQ instances, proxies
// and certificates in ferrytest/servers.
package testenv
