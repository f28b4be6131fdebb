package inbox

import "go.uber.org/fx"

// CleanerModule runs a Cleaner built from a provided CleanerConfig for the
// app's lifetime. Process needs no lifecycle: provide an Inbox with New.
var CleanerModule = fx.Module("inbox-cleaner",
	fx.Provide(NewCleaner),
	fx.Invoke(func(lc fx.Lifecycle, c *Cleaner) { lc.Append(fx.StartStopHook(c.Start, c.Stop)) }),
)
