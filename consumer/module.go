package consumer

import "go.uber.org/fx"

// Module runs a Consumer built from a provided Config for the app's
// lifetime.
var Module = fx.Module("consumer",
	fx.Provide(New),
	fx.Invoke(func(lc fx.Lifecycle, c *Consumer) { lc.Append(fx.StartStopHook(c.Start, c.Stop)) }),
)
