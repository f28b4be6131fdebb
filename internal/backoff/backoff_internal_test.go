package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The poller's and WAL relay's table (base 500ms) and the consumer's.
func TestCapped(t *testing.T) {
	t.Parallel()
	const base = 500 * time.Millisecond
	tests := []struct {
		base, ceiling time.Duration
		failures      int
		want          time.Duration
	}{
		{base, time.Minute, 1, 500 * time.Millisecond},
		{base, time.Minute, 2, time.Second},
		{base, time.Minute, 3, 2 * time.Second},
		{base, time.Minute, 7, 32 * time.Second},
		{base, time.Minute, 8, time.Minute},
		{base, 30 * time.Second, 8, 30 * time.Second},
		{base, time.Hour, 1000, time.Hour}, // no overflow, however many failures
		{base, 100 * time.Millisecond, 1, 100 * time.Millisecond},
		{base, time.Minute, 0, 500 * time.Millisecond}, // below 1 counts as 1
		{time.Second, 30 * time.Second, 5, 16 * time.Second},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, capped(tt.base, tt.ceiling, tt.failures), "capped(%s, %s, %d)", tt.base, tt.ceiling, tt.failures)
	}

	prev := time.Duration(0)
	for f := 1; f <= 100; f++ {
		d := capped(base, 30*time.Second, f)
		require.GreaterOrEqual(t, d, prev, "never shrinks (failures %d)", f)
		require.LessOrEqual(t, d, 30*time.Second)
		prev = d
	}
	require.Equal(t, 30*time.Second, prev)
}

// The jitter stays within ±20% and does spread the waits.
func TestExponentialJitter(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for range 200 {
		d := Exponential(time.Second, time.Minute, 3) // 4s ± 20%
		require.GreaterOrEqual(t, d, 3200*time.Millisecond)
		require.LessOrEqual(t, d, 4800*time.Millisecond)
		seen[d] = true
	}
	require.Greater(t, len(seen), 100, "the waits are spread, not one value")
}
