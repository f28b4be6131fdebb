package main

import (
	"context"
	"fmt"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ferry-outbox/ferry/dev/bench"
	"github.com/ferry-outbox/ferry/dev/devserver"
	"github.com/ferry-outbox/ferry/workflows"
)

// pprofEnv names a host:port where the server process serves
// net/http/pprof; unset serves none.
const pprofEnv = "FERRY_BENCH_TEMPORAL_PPROF"

func main() {
	os.Exit(run())
}

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv, err := devserver.Start(sctx, devserver.Config{
		DatabasePath:     os.Getenv(bench.TemporalDBEnv),
		Address:          "127.0.0.1:0",
		LogFile:          os.Getenv(bench.TemporalLogEnv),
		LogLevel:         "warn",
		SearchAttributes: workflows.SearchAttributeTypes,
		MetricsAddress:   os.Getenv(bench.TemporalMetricsEnv),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry-bench-temporal: %v\n", err)
		return 1
	}
	if addr := os.Getenv(pprofEnv); addr != "" {
		// For profiling the server under a workload: go tool pprof
		// http://ADDR/debug/pprof/profile?seconds=20
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
	fmt.Println(bench.TemporalReady + srv.FrontendAddress())
	<-ctx.Done()
	if err := srv.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "ferry-bench-temporal: stop: %v\n", err)
	}
	return 0
}
