package testenv

import (
	"log/slog"
	"net"
	"testing"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// ClosedAddr returns a local host:port where nothing listens: dialling it is
// refused at once.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("close probe listener: %v", err)
	}
	return addr
}

// LazyTemporal returns a Temporal client for addr that dials only when
// used and logs nothing; closed at cleanup. Pointed at ClosedAddr, every
// call through it fails, which is what failure-path tests need.
func LazyTemporal(t testing.TB, addr string) client.Client {
	t.Helper()
	c, err := client.NewLazyClient(client.Options{HostPort: addr, Namespace: "default", Logger: QuietLogger()})
	if err != nil {
		t.Fatalf("lazy Temporal client for %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// QuietLogger is a Temporal SDK logger that drops everything.
func QuietLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}
