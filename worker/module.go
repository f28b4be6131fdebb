package worker

import "go.uber.org/fx"

// Module runs a Worker built from a provided Config for the app's lifetime.
var Module = fx.Module("worker",
	fx.Provide(New),
	fx.Invoke(func(lc fx.Lifecycle, w *Worker) { lc.Append(fx.StartStopHook(w.Start, w.Stop)) }),
)
