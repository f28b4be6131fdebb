// Package settings is the one table of Ferry's settings: for each, its
// flag and config-file key, its FERRY_* environment variable, the Go field
// an embedding service sets, its default, what it does, which component
// owns it and when a change takes effect.
//
// The defaults are the constants here (or the owning package's, which the
// table names): package ferry fills zero fields from them, the ferry
// command's flags are defined from the table (their usage and defaults
// come from it), and docs/configuration.md's reference is generated from
// it (go generate ./internal/settings; a test fails when the committed page
// drifts).
//
// It owns no parsing of flags (the CLI binds them; this module does not
// depend on cobra) and no validation: each config's WithDefaults validates
// its own fields and names them in its errors, and the CLI maps those
// names back to flags with Field.
package settings

//go:generate go run ./gen -o ../../docs/configuration.md
