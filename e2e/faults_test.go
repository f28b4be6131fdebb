package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The fault suite: each test runs a checker workload (see checker_test.go)
// through Ferry in processes of its own while one fault strikes, and the
// checker accounts for every event. The long versions are in
// faults_long_test.go (build tag faults, `make test-faults`).

// With no fault at all the checker passes and counts no duplicate: the
// baseline the fault tests are read against.
func TestFaultNone(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.newChecker(t)
	e.startProcess(t, "run")
	c.startConsumer(t)
	c.waitConsuming(t)
	c.runLoad(load{limit: 150})
	r := c.check(time.Minute)
	require.Zero(t, r.DuplicateCopies+r.DuplicateSignals+r.Absorbed, "no fault, no duplicate")
}
