package fulfilment

import "go.uber.org/fx"

// Module runs the fulfilment worker with the app: it needs a Config, a
// client.Client and a *pgxpool.Pool in the graph.
var Module = fx.Module("orders.fulfilment",
	fx.Provide(NewWorker),
	fx.Invoke(func(lc fx.Lifecycle, w *Worker) { lc.Append(fx.StartStopHook(w.Start, w.Stop)) }),
)
