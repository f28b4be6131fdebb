package walrelay

import "time"

// SetVisibleTimeout shortens how long r waits for streamed rows to become
// visible, for a test that cannot wait the default. Before Start.
func SetVisibleTimeout(r *Relay, d time.Duration) { r.visibleTimeout = d }
