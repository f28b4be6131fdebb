package poller

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An aggregate counts as recent for at least one window after its last
// dispatch and at most two; memory stays bounded by turning over early.
func TestRecentSet(t *testing.T) {
	t.Parallel()
	const window = time.Minute
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

	t.Run("first dispatch is not recent, the next within the window is", func(t *testing.T) {
		t.Parallel()
		r := newRecentSet(window, 100)
		require.False(t, r.seen("a", t0))
		require.True(t, r.seen("a", t0.Add(time.Second)))
		require.False(t, r.seen("b", t0.Add(time.Second)))
	})
	t.Run("recent for a whole window across a turnover", func(t *testing.T) {
		t.Parallel()
		r := newRecentSet(window, 100)
		require.False(t, r.seen("a", t0.Add(window-time.Second)))
		// The window turns over at t0+window; "a" is in the older half.
		require.False(t, r.seen("b", t0.Add(window)))
		require.True(t, r.seen("a", t0.Add(2*window-2*time.Second)))
	})
	t.Run("forgotten after two windows", func(t *testing.T) {
		t.Parallel()
		r := newRecentSet(window, 100)
		require.False(t, r.seen("a", t0))
		require.False(t, r.seen("a", t0.Add(2*window+time.Second)))
	})
	t.Run("a quiet spell longer than two windows forgets all", func(t *testing.T) {
		t.Parallel()
		r := newRecentSet(window, 100)
		require.False(t, r.seen("a", t0))
		require.False(t, r.seen("b", t0.Add(window/2)))
		require.False(t, r.seen("b", t0.Add(5*window)), "kept across a long quiet spell")
	})
	t.Run("bounded: turns over early when full", func(t *testing.T) {
		t.Parallel()
		r := newRecentSet(time.Hour, 10)
		for i := range 35 {
			require.False(t, r.seen(fmt.Sprint(i), t0))
		}
		require.LessOrEqual(t, len(r.current)+len(r.previous), 20)
		require.True(t, r.seen("34", t0), "the newest are kept")
		// Three turnovers (at the 11th, 21st and 31st key) keep 20-29 in
		// the older generation and forget 0-19.
		require.True(t, r.seen("20", t0), "the previous window is kept")
		require.False(t, r.seen("19", t0), "two windows back is forgotten")
	})
}
