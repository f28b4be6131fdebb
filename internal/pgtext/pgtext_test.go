package pgtext_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/internal/pgtext"
)

func TestTruncate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"short stays", "broker closed", 100, "broker closed"},
		{"cut at n", "abcdef", 3, "abc"},
		{"exactly n", "abc", 3, "abc"},
		{"zero", "abc", 0, ""},
		{"negative counts as zero", "abc", -1, ""},
		// "é" is two bytes: a cut through it drops it whole.
		{"no split rune", "café", 4, "caf"},
		{"rune kept when it fits", "café", 5, "café"},
		// "€" is three bytes.
		{"three-byte rune", "a€", 3, "a"},
		{"invalid UTF-8 replaced", "bad \xff\xfe byte", 100, "bad ? byte"},
		{"invalid UTF-8 in a short string", "\xff", 10, "?"},
		{"NUL replaced", "a\x00b", 10, "a?b"},
		{"continuation bytes only", "\x80\x80\x80\x80\x80", 2, "?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := pgtext.Truncate(tt.in, tt.n)
			require.Equal(t, tt.want, got)
			require.True(t, utf8.ValidString(got))
			require.LessOrEqual(t, len(got), max(tt.n, 0))
		})
	}
}

func TestTruncateLongErrors(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("ü", 1000) // 2000 bytes
	got := pgtext.Truncate(s, 1001)
	require.Equal(t, 1000, len(got), "the cut does not split a rune")
	require.True(t, utf8.ValidString(got))
}
