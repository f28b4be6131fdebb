// Package codec encrypts what Ferry writes into Temporal: every payload of a
// workflow history (signal arguments, activity inputs and results, update
// arguments such as a repair's patched payload, memos, queries) is sealed
// with AES-256-GCM before it leaves the process, by a converter.PayloadCodec
// that every Temporal client of Ferry carries when keys are configured.
//
// An encrypted payload has the metadata encoding "binary/encrypted" and the
// id of the key that sealed it ("encryption-key-id"); its data is a random
// nonce followed by the sealed, serialised original payload. Keys rotate: a
// Codec holds several, seals with the first and opens with whichever key a
// payload names. A payload that is not encrypted (written before the codec
// was turned on) passes through Decode unchanged.
//
// Search attributes are not payloads the codec sees: Temporal indexes them
// in clear, so Ferry puts only event ids, types and error classes there.
//
// The package owns the key format, the sealing and an HTTP handler for the
// Temporal UI's codec endpoint. It does not read flags or files (internal/app
// does) and does not decide what Ferry puts into payloads.
package codec
