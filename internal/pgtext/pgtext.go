// Package pgtext makes Go strings safe for Ferry's PostgreSQL text columns
// (last_error, the e-mail ledger's reply): PostgreSQL refuses a string
// with invalid UTF-8 or a NUL byte, and an error message or an SMTP reply
// can carry either, or be far longer than a row should hold.
//
// It owns no SQL and no connection: callers pass the result as a bound
// argument.
package pgtext

import (
	"strings"
	"unicode/utf8"
)

// Truncate returns s cut to at most maxBytes bytes at a rune boundary,
// with every run of invalid UTF-8 and every NUL byte replaced by "?", so
// PostgreSQL stores it as text.
func Truncate(s string, maxBytes int) string {
	if maxBytes < 0 {
		maxBytes = 0
	}
	if len(s) > maxBytes {
		// Back up to the start of the rune the cut would split (at most
		// utf8.UTFMax-1 bytes; further back is invalid UTF-8 anyway, and
		// replaced below).
		n := maxBytes
		for i := 0; i < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); i++ {
			n--
		}
		if !utf8.RuneStart(s[n]) {
			n = maxBytes
		}
		s = s[:n]
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "?")
}
