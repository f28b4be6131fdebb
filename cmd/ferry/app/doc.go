// Package app is the ferry binary's process: it turns one Config (the
// library's configs plus the process's own settings) into the fx app of
// the library's modules (package ferry), with what only the binary has: a
// trace exporter, a Prometheus registry served on its own listener, a
// codec key file and the mask of sensitive fields.
//
// It owns no relay, delivery or connection logic (package ferry does) and
// no flags (the CLI binds them from internal/settings).
package app
