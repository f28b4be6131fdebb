package serve

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// Loop is one server's listener and serving goroutine. The zero value is
// ready to use.
type Loop struct {
	// Name prefixes Start's errors ("payprovider: listen on …"); may be empty.
	Name string

	mu      sync.Mutex
	ln      net.Listener
	done    chan struct{}
	stopped bool
}

// Start listens on addr and runs serve with the listener on a goroutine of
// its own; it returns once the address is bound.
func (l *Loop) Start(ctx context.Context, addr string, serve func(net.Listener) error) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		if l.Name != "" {
			return fmt.Errorf("%s: listen on %s: %w", l.Name, addr, err)
		}
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	done := make(chan struct{})
	l.mu.Lock()
	l.ln, l.done = ln, done
	l.mu.Unlock()
	go func() {
		defer close(done)
		_ = serve(ln)
	}()
	return nil
}

// Stop calls closeAll, which must end serve (closing the server closes the
// listener and its connections), and waits for serve to return. Only the
// first call after Start does anything.
func (l *Loop) Stop(closeAll func()) {
	l.mu.Lock()
	if l.stopped || l.done == nil {
		l.stopped = true
		l.mu.Unlock()
		return
	}
	l.stopped = true
	done := l.done
	l.mu.Unlock()
	closeAll()
	<-done
}

// Addr is the bound host:port; empty before Start.
func (l *Loop) Addr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		return ""
	}
	return l.ln.Addr().String()
}
