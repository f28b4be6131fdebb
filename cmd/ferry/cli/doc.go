// Package cli is the `ferry` command: migrate, run, worker, poller and dev.
//
// It owns flags, environment variables, signal handling and what the
// commands print. Everything it runs lives in other packages.
package cli
