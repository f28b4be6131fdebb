package poller

import (
	"sync"
	"time"
)

// recentMax bounds the aggregates a recentSet remembers per window: beyond
// it the window turns over early, so memory stays bounded under any number
// of aggregates (the cost of forgetting is one one-shot start that finds a
// run open and signals it instead).
const recentMax = 100_000

// recentSet remembers which aggregates this poller dispatched within about
// a window: two generations of a map, the older dropped when the window
// turns over. An aggregate is recent if either holds it, so one counts for
// at least one window and at most two after its last dispatch.
type recentSet struct {
	window time.Duration
	max    int

	mu       sync.Mutex
	current  map[string]struct{}
	previous map[string]struct{}
	turnedAt time.Time
}

func newRecentSet(window time.Duration, max int) *recentSet {
	return &recentSet{window: window, max: max, current: map[string]struct{}{}}
}

// seen reports whether key was dispatched within the window before now,
// and records that it is dispatched now.
func (r *recentSet) seen(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.turnedAt.IsZero() {
		r.turnedAt = now
	}
	if now.Sub(r.turnedAt) >= r.window || len(r.current) >= r.max {
		r.previous, r.current = r.current, make(map[string]struct{}, len(r.current))
		if now.Sub(r.turnedAt) >= 2*r.window {
			r.previous = nil // nothing in it is recent any more
		}
		r.turnedAt = now
	}
	_, inCurrent := r.current[key]
	_, inPrevious := r.previous[key]
	r.current[key] = struct{}{}
	return inCurrent || inPrevious
}
