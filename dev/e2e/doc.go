// Package e2e holds Ferry's end-to-end tests: real PostgreSQL, real RabbitMQ
// and an embedded Temporal server, with Ferry run in-process (constructors,
// no fx) or as a separate `ferry run` process that a test can SIGKILL.
//
// The fault suite (faults_test.go; the long runs in faults_long_test.go,
// build tag faults) injects one fault at a time under load and lets a
// Jepsen-style checker (checker_test.go) account for every event. The test
// binary re-executes itself as the processes those tests kill: `ferry`
// commands, the checker's consumer and a Temporal server (main_test.go).
//
// It is the only test package that links the Temporal server; keep it that
// way (each such test binary is large and slow to link).
package e2e
