//go:build faults

package e2e

import "testing"

// The case at full size: a poison event followed by 50,000 events
// on its aggregate, with the default bound; prints the figures.
func TestLongBusyBlockedAggregate(t *testing.T) {
	busyBlocked(t, 50000, 0)
}
