package consumer

import (
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/metrics"
)

// Module runs a Consumer built from a provided Config for the app's
// lifetime. A *metrics.Consumer in the graph (Ferry's metrics module
// provides one) is used when Config.Metrics is nil.
var Module = fx.Module("consumer",
	fx.Provide(newWithGraph),
	fx.Invoke(func(lc fx.Lifecycle, c *Consumer) { lc.Append(fx.StartStopHook(c.Start, c.Stop)) }),
)

type graph struct {
	fx.In

	Config  Config
	Metrics *metrics.Consumer `optional:"true"`
}

func newWithGraph(g graph) (*Consumer, error) {
	if g.Config.Metrics == nil && g.Metrics != nil {
		g.Config.Metrics = g.Metrics
	}
	return New(g.Config)
}
