// Command orders runs the example orders service with Ferry embedded: see
// examples/orders/README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/examples/orders"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "orders: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var srv *orders.Server
	app := fx.New(orders.Options(orders.ConfigFromEnv()), fx.NopLogger, fx.Populate(&srv))
	if err := app.Err(); err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return err
	}
	fmt.Printf("orders: listening on http://%s/orders with Ferry's poller and worker embedded. Ctrl-C stops.\n", srv.Addr())
	<-ctx.Done()
	// Detached: ctx is cancelled, and stopping needs time of its own.
	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelStop()
	return app.Stop(stopCtx)
}
