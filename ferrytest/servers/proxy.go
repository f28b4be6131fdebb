package servers

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy between a client under test and a real service
// (RabbitMQ, PostgreSQL, Temporal), for outage tests that must not disturb
// other tests sharing the service: only connections made through the proxy
// are cut.
//
//   - DropConnections closes every connection open through the proxy, as a
//     broker restart or a network reset would; new connections still work.
//   - Pause closes the listener too, so dialling Addr is refused until Resume
//     listens again on the same port.
//   - Stall stops forwarding bytes in both directions while the connections
//     stay open, like a hung peer or a black-holed route; Unstall (or
//     DropConnections, Pause) ends it. Held reports the bytes a stalled
//     proxy has taken from a client and not yet forwarded, so a test can
//     wait until a request is "on the wire" before breaking it.
//
// The proxy closes everything and waits for its goroutines at test cleanup.
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener // nil while paused
	conns   map[net.Conn]struct{}
	stalled chan struct{} // non-nil while stalled; closed to release the copiers
	held    int64
	closed  bool
	wg      sync.WaitGroup
}

// NewProxy listens on a free port of 127.0.0.1 and forwards every accepted
// connection to target (host:port).
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	p := &Proxy{t: t, target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.close)
	return p
}

// Addr is the host:port clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.addr }

// DropConnections closes all connections currently open through the proxy.
func (p *Proxy) DropConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unstallLocked()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Pause stops listening and drops all connections: dialling Addr is refused.
func (p *Proxy) Pause() { p.unlisten(false) }

// unlisten closes the listener and drops all connections; closed marks the
// proxy closed for good in the same critical section.
func (p *Proxy) unlisten(closed bool) {
	p.mu.Lock()
	p.closed = p.closed || closed
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	p.DropConnections()
}

// Resume listens on Addr again after Pause. The port may be re-bound right
// away: a listening socket is not blocked by old connections in TIME_WAIT.
func (p *Proxy) Resume() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil || p.closed {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.ln = ln
	p.serve(ln)
}

// Stall stops forwarding data on all connections, current and new, until
// Unstall, DropConnections or Pause.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Unstall forwards what was held and resumes forwarding.
func (p *Proxy) Unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unstallLocked()
}

// Held is the number of bytes read from either side while stalled and not
// yet forwarded.
func (p *Proxy) Held() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *Proxy) unstallLocked() {
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

func (p *Proxy) serve(ln net.Listener) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Pause or cleanup
			}
			p.handle(ln, c)
		}
	}()
}

func (p *Proxy) handle(ln net.Listener, client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.ln != ln || p.closed {
		// Paused (or closed) while this connection was being accepted: it
		// must not outlive the pause.
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[client] = struct{}{}
	p.conns[server] = struct{}{}
	p.mu.Unlock()

	p.wg.Add(2)
	go p.pipe(server, client)
	go p.pipe(client, server)
}

// pipe copies from src to dst until either side closes, then closes both so
// the peer of a dropped connection sees it at once.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitForward(n)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitForward blocks while the proxy is stalled. A drop releases it too; the
// write that follows then fails on the closed connection.
func (p *Proxy) waitForward(n int) {
	p.mu.Lock()
	gate := p.stalled
	if gate == nil {
		p.mu.Unlock()
		return
	}
	p.held += int64(n)
	p.mu.Unlock()
	<-gate
	p.mu.Lock()
	p.held -= int64(n)
	p.mu.Unlock()
}

func (p *Proxy) close() {
	p.unlisten(true)
	p.wg.Wait()
}
