package walrelay

import "go.uber.org/fx"

// Module runs a Relay built from a provided Config for the app's lifetime.
var Module = fx.Module("walrelay",
	fx.Provide(New),
	fx.Invoke(func(lc fx.Lifecycle, r *Relay) { lc.Append(fx.StartStopHook(r.Start, r.Stop)) }),
)
