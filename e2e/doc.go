// Package e2e holds Ferry's end-to-end tests: real PostgreSQL, real RabbitMQ
// and an embedded Temporal server, with Ferry run in-process (constructors,
// no fx) or as a separate `ferry run` process that a test can SIGKILL.
//
// It is the only test package that links the Temporal server; keep it that
// way (each such test binary is large and slow to link).
package e2e
