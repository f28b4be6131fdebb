package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

// RoleEnv tells a re-executed ferry-bench binary which part to play:
// RoleRelay, or unset for the benchmark itself.
const RoleEnv = "FERRY_BENCH_ROLE"

// RoleRelay: the plain relay (RelayMain).
const RoleRelay = "relay"

// Settings of the Temporal server, read by dev/cmd/ferry-bench-temporal.
const (
	// TemporalDBEnv is the SQLite file the server keeps its state in.
	TemporalDBEnv = "FERRY_BENCH_TEMPORAL_DB"
	// TemporalLogEnv is the server's log file.
	TemporalLogEnv = "FERRY_BENCH_TEMPORAL_LOG"
	// TemporalMetricsEnv is the host:port where the server serves its own
	// metrics (Prometheus text format, path /metrics); empty serves none.
	TemporalMetricsEnv = "FERRY_BENCH_TEMPORAL_METRICS"
	// TemporalReady starts the line the server prints when its
	// frontend answers; the frontend's host:port follows.
	TemporalReady = "ferry-bench temporal: ready on "
)

// Settings of the relay role.
const (
	relayPostgresEnv = "FERRY_BENCH_RELAY_POSTGRES_URL"
	relayAMQPEnv     = "FERRY_BENCH_RELAY_AMQP_URL"
	relayExchangeEnv = "FERRY_BENCH_RELAY_EXCHANGE"
	relayBatchEnv    = "FERRY_BENCH_RELAY_BATCH_SIZE"
	relayReady       = "ferry-bench relay: ready"
)

// RelayMain runs the plain relay in this process until SIGTERM, configured
// by the FERRY_BENCH_RELAY_* variables the benchmark sets, and returns the
// exit code.
func RelayMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	batch, _ := strconv.Atoi(os.Getenv(relayBatchEnv))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := NewRelay(RelayConfig{
		PostgresURL: os.Getenv(relayPostgresEnv), AMQPURL: os.Getenv(relayAMQPEnv),
		Exchange: os.Getenv(relayExchangeEnv), BatchSize: batch, Logger: logger,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry-bench relay: %v\n", err)
		return 1
	}
	err = r.Run(ctx, func() { fmt.Println(relayReady) })
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry-bench relay: %v\n", err)
		return 1
	}
	fmt.Printf("ferry-bench relay: stopped after publishing %d events\n", r.Published)
	return 0
}
