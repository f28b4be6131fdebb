// Package settings is the one table of the ferry command's settings: for
// each, its flag and config-file key, its FERRY_* environment variable,
// the Go field an embedding service sets instead, its default, what it
// does, which component owns it and when a change takes effect.
//
// The defaults are the constants of the packages that own them (package
// ferry's local defaults, poller.DefaultBatchSize, …; the ferry binary's
// own are here), which the table names: the library fills zero fields from
// the same constants, the command's flags are defined from the table
// (their usage and defaults come from it), and docs/configuration.md's
// reference is generated from it (cd cmd/ferry && go generate
// ./internal/settings; a test fails when the committed page drifts, or
// when a library Config field has no row).
//
// It owns no parsing of flags (the CLI binds them with cobra) and no
// validation: each config's WithDefaults validates its own fields and
// names them in its errors, and the CLI maps those names back to flags
// with Field.
package settings

//go:generate go run ./gen -o ../../../../docs/configuration.md
