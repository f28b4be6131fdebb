package ferrytest

import (
	"log/slog"
	"net"
	"testing"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// ClosedAddr returns a local host:port where nothing listens: dialling it
// is refused at once.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("ferrytest: find a free port: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		tb.Fatalf("ferrytest: close the probe listener: %v", err)
	}
	return addr
}

// LazyTemporal returns a Temporal client for addr that dials only when
// used and logs nothing; it is closed at the test's cleanup.
func LazyTemporal(tb testing.TB, addr string) client.Client {
	tb.Helper()
	c, err := client.NewLazyClient(client.Options{HostPort: addr, Namespace: client.DefaultNamespace, Logger: QuietLogger()})
	if err != nil {
		tb.Fatalf("ferrytest: lazy Temporal client for %s: %v", addr, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// UnreachableTemporal is a Temporal client every call of which fails: a
// lazy client of a local port where nothing listens. It is for a relay in
// the publish-first lane (relaytest.Config.Config.Lane
// poller.LanePublishFirst, Roles{Poller: true}) in a test that expects no
// event to need its workflow: the lane publishes to RabbitMQ itself and
// calls Temporal only to hand an aggregate over, so a handoff shows as an
// event that is never published (WaitPublished names it, with its last
// error).
func UnreachableTemporal(tb testing.TB) client.Client {
	tb.Helper()
	return LazyTemporal(tb, ClosedAddr(tb))
}

// QuietLogger is a Temporal SDK logger that drops everything.
func QuietLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}
