// Package backoff computes how long a loop waits after consecutive
// failures before it tries again: the poller's and the WAL relay's claim
// and reconnect loops, and the consumer's reconnects and redeliveries.
//
// It owns only the arithmetic; the caller sleeps (in a select on its
// context) and counts its failures. Temporal's retries are not here: they
// are RetryPolicy settings on the activities.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Exponential is the wait before attempt number failures+1: base after
// the first failure, doubling with each further one, capped at ceiling,
// then spread by ±20% jitter so that processes that failed together (a
// PostgreSQL or RabbitMQ restart fails every poller and consumer at once)
// do not come back together. A failures below 1 counts as 1; a ceiling
// below base caps base.
func Exponential(base, ceiling time.Duration, failures int) time.Duration {
	return jitter(capped(base, ceiling, failures))
}

// capped is Exponential without the jitter: min(base×2^(failures-1), ceiling).
func capped(base, ceiling time.Duration, failures int) time.Duration {
	d := min(base, ceiling)
	for i := 1; i < failures && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
