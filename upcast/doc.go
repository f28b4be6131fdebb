// Package upcast is a registry of payload schema versions per event type and
// of the upcasters that lift an old payload to the version a consumer's
// handler understands.
//
// Producers stamp each event with a schema version (the ferry-schema-version
// header). A consumer registers, per event type, the current version its
// handler reads and one upcaster per older version it still accepts
// (v → v+1). Upcast then chains them. An event whose version is newer than
// the consumer knows, below 1, or older than the oldest upcaster is refused
// with an error that says which, and so is one whose upcaster fails: the
// consumer quarantines it instead of applying it.
//
// The package is pure: no I/O, no broker, no database.
package upcast
