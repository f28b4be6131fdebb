package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted is Start's answer when the service runs, or ran, already.
var ErrStarted = errors.New("already started")

// Runner runs one loop at a time. The zero value is ready to use; it must
// not be copied after first use.
type Runner struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs loop in a goroutine and returns at once. loop's context is
// ctx's values without its deadline or cancellation (Start's ctx is often a
// start-up deadline); Stop cancels it. A Runner starts once: later calls
// return ErrStarted.
func (r *Runner) Start(ctx context.Context, loop func(ctx context.Context)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel, r.done = cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		loop(ctx)
	}(r.done)
	return nil
}

// Stop cancels the loop's context and waits until it returned. It reports
// whether the loop had been started; without Start, or on a second call
// after the loop ended, it returns at once.
func (r *Runner) Stop() bool {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	<-done
	return true
}
