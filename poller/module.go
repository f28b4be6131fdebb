package poller

import "go.uber.org/fx"

// Module runs a Poller built from a provided Config for the app's lifetime.
var Module = fx.Module("poller",
	fx.Provide(New),
	fx.Invoke(func(lc fx.Lifecycle, p *Poller) { lc.Append(fx.StartStopHook(p.Start, p.Stop)) }),
)
