// Package smtpsink is a sandbox SMTP server (emersion/go-smtp) that records
// every message it accepts, for `ferry dev` and tests.
//
// Faults are injected per message at the end of DATA (Config.Faults): a
// temporary refusal (451), a permanent one (554), or a drop after DATA:
// the message is recorded as accepted and the connection is closed before
// the reply to the final "." (RFC 1047's duplicate window), so the client
// cannot know it was delivered.
package smtpsink
