//go:build !failpoints

package failpoint

// Enabled: this build has failpoints (the failpoints build tag). Without
// the tag it has none.
const Enabled = false

// Inject does nothing without the failpoints build tag: the call is inlined
// away, and FERRY_FAILPOINTS is never read.
func Inject(string) {}
