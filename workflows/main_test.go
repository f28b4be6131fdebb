package workflows_test

import (
	"testing"

	"go.uber.org/goleak"
)

// No goleak options: the test environment and the replayer stop all their
// goroutines when a workflow ends, so anything left over is a real leak.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
