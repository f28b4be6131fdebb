package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ferry-outbox/ferry/examples/inventory"
	"github.com/ferry-outbox/ferry/metrics"
)

// consumeExampleCmd runs the example consumer alone, e.g. next to `ferry
// run` and a real producer.
func consumeExampleCmd(g *globals) *cobra.Command {
	var (
		queue       string
		resendEvery int
	)
	cmd := &cobra.Command{
		Use:   "consume-example",
		Short: "Run the example inventory consumer (inbox + RabbitMQ runner) until Ctrl-C",
		Long: `Consumes order.created and order.paid from --exchange into the queue --queue,
reserving stock in the table inventory_reservations of --postgres-url, each
event once (see docs/consuming.md, "Consuming events"). It prints one line per delivery.
With --metrics-address it serves the consumer's metrics (outcomes,
dead-lettered messages, lag, queue depth) on /metrics.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, logger, err := g.config()
			if err != nil {
				return err
			}
			red, err := cfg.Redactor()
			if err != nil {
				return err
			}
			if resendEvery < 0 {
				return fmt.Errorf("--resend-every %d: must be 0 (off) or more", resendEvery)
			}
			var m *metrics.Consumer
			if cfg.MetricsAddress != "" {
				reg := metrics.NewRegistry()
				if m, err = metrics.NewConsumer(reg); err != nil {
					return err
				}
				srv := metrics.NewServer(cfg.MetricsAddress, reg)
				if err := srv.Start(cmd.Context()); err != nil {
					return err
				}
				defer srv.Stop()
				fmt.Fprintf(g.stdout, "consume-example: Prometheus /metrics on http://%s/metrics\n", srv.Addr())
			}
			return inventory.Run(cmd.Context(), inventory.Config{
				PostgresURL: cfg.Postgres.URL, AMQPURL: cfg.AMQPURL, Exchange: cfg.Exchange,
				Queue: queue, Out: g.stdout, ResendEvery: resendEvery, Logger: logger, Redact: red, Metrics: m,
			})
		},
	}
	cmd.Flags().StringVar(&queue, "queue", inventory.DefaultQueue, "the consumer's queue")
	cmd.Flags().IntVar(&resendEvery, "resend-every", 0, "re-send every n-th applied message to show deduplication (0: off)")
	return cmd
}
