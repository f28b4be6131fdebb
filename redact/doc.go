// Package redact hides the values of sensitive payload fields in what Ferry
// shows people: log lines, command output, error messages, and the reasons
// of messages a consumer parks.
//
// A deployment names its sensitive fields (docs/operating.md, "Privacy"); New turns those
// specs into a Redactor. Three uses, from exact to best effort:
//
//   - Payload rewrites a JSON payload with every sensitive value replaced by
//     Mask, keeping the document's shape, so an operator still sees which
//     fields an event has.
//   - Text scrubs a message derived from a payload (a handler's error, a last
//     error): every sensitive value found in that payload is replaced
//     wherever it occurs in the text, and so is any "field": value or
//     field=value fragment of a sensitive field.
//   - Handler wraps a slog.Handler so that attributes named like a sensitive
//     field, and such fragments in any message or attribute, are masked.
//
// A nil *Redactor is valid and changes nothing: redaction is off until a
// field is named.
//
// The package owns the spec syntax and the matching. It does not decide
// where redaction applies (the callers: cli, consumer) and does not encrypt
// anything (package codec does, for Temporal's history).
package redact
