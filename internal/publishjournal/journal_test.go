//go:build failpoints

package publishjournal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/internal/publishjournal"
)

// A re-executed test binary (childEnv=1) publishes once into the schema
// at childURL, with the environment the test gave it.
const (
	childEnv = "PUBLISHJOURNAL_TEST_CHILD"
	childURL = "PUBLISHJOURNAL_TEST_URL"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(child())
	}
	// This process journals; its children as each test says.
	os.Setenv(publishjournal.EnvVar, "1")
	goleak.VerifyTestMain(m)
}

func child() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(childURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	publishjournal.Relay(ctx, pool, "child", "order", "A", 1, 1, 7, time.Now().Add(time.Minute)).End(nil)
	fmt.Println("published")
	return 0
}

func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db := ferrytest.NewDB(t, "")
	require.NoError(t, publishjournal.CreateTable(context.Background(), db.Pool))
	return db.Pool
}

func read(t *testing.T, pool *pgxpool.Pool) []publishjournal.Record {
	t.Helper()
	recs, err := publishjournal.Read(context.Background(), pool)
	require.NoError(t, err)
	return recs
}

// The start is on record before Relay returns (a publisher killed
// mid-publish leaves it, without an end); End adds the end and the
// outcome the hook saw.
func TestRelayRecordsTheStartAtOnceAndTheEndAfter(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	bound := time.Now().Add(12 * time.Second)
	before := time.Now()
	failed := publishjournal.Relay(ctx, pool, "poller-0", "order", "A", 3, 5, 42, bound)
	recs := read(t, pool)
	require.Len(t, recs, 1)
	r := recs[0]
	require.Equal(t, []any{"order", "A", int64(3), int64(5), int64(42), "relay poller-0"},
		[]any{r.AggregateType, r.AggregateID, r.First, r.Last, r.Epoch, r.Party})
	require.WithinDuration(t, bound, r.Bound, time.Microsecond)
	require.False(t, r.Started.Before(before.Truncate(time.Microsecond)))
	require.True(t, r.Ended.IsZero(), "no end while the publish runs")

	err := errors.New("publish to exchange x: unroutable")
	failed.End(&err)
	var none error
	publishjournal.Relay(ctx, pool, "poller-0", "order", "A", 3, 3, 43, bound).End(&none)
	publishjournal.Relay(ctx, pool, "poller-1", "order", "B", 1, 1, 44, bound).End(nil)
	recs = read(t, pool)
	require.Len(t, recs, 3)
	for _, r := range recs {
		require.False(t, r.Ended.Before(r.Started), "ended %s before it started %s", r.Ended, r.Started)
	}
	require.Equal(t, []string{"publish to exchange x: unroutable", "confirmed", ""},
		[]string{recs[0].Outcome, recs[1].Outcome, recs[2].Outcome})
}

// A workflow run's publish names the run and is bounded by its activity's
// deadline; without an epoch (the workflow lane) nothing is recorded.
func TestRunRecordsTheRunAndItsDeadline(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	var deadline time.Time
	publish := func(ctx context.Context, epoch int64) error {
		deadline = activity.GetInfo(ctx).Deadline
		var err error
		publishjournal.Run(ctx, pool, "order", "B", 2, 4, epoch).End(&err)
		return nil
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(publish, activity.RegisterOptions{Name: "publish"})
	_, err := env.ExecuteActivity("publish", int64(0))
	require.NoError(t, err)
	require.Empty(t, read(t, pool), "no epoch, no row")
	_, err = env.ExecuteActivity("publish", int64(9))
	require.NoError(t, err)
	recs := read(t, pool)
	require.Len(t, recs, 1)
	require.Equal(t, int64(9), recs[0].Epoch)
	require.True(t, strings.HasPrefix(recs[0].Party, "run default-test-workflow-id/"), recs[0].Party)
	require.False(t, deadline.IsZero(), "the test environment gives activities a deadline")
	require.WithinDuration(t, deadline, recs[0].Bound, time.Microsecond)
	require.Equal(t, "confirmed", recs[0].Outcome)
}

// A schema without the table gets no journal and no error: the journal is
// kept only where a test made the table (before its publishers started:
// the pool is not asked again).
func TestNoTableNoJournal(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	publishjournal.Relay(ctx, db.Pool, "poller-0", "order", "A", 1, 1, 1, time.Now()).End(nil)
	require.NoError(t, publishjournal.CreateTable(ctx, db.Pool))
	publishjournal.Relay(ctx, db.Pool, "poller-0", "order", "A", 2, 2, 2, time.Now()).End(nil)
	require.Empty(t, read(t, db.Pool))
}

// A start that cannot be written (here: its context is over) is written by
// End, whole, once the publish returned.
func TestEndWritesTheWholeRowWhenTheStartFailed(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := publishjournal.Relay(ctx, pool, "poller-0", "order", "A", 1, 2, 5, time.Now().Add(time.Second))
	require.Empty(t, read(t, pool))
	var none error
	e.End(&none)
	recs := read(t, pool)
	require.Len(t, recs, 1)
	require.Equal(t, int64(5), recs[0].Epoch)
	require.False(t, recs[0].Ended.IsZero())
	require.Equal(t, "confirmed", recs[0].Outcome)
}

// The variable decides, read once per process: unset, a process keeps no
// journal; a value that is no boolean panics at the first publish.
func TestTheVariableSwitchesItOn(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	require.NoError(t, publishjournal.CreateTable(context.Background(), db.Pool))
	run := func(value string) (string, error) {
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, publishjournal.EnvVar+"=") })
		if value != "" {
			env = append(env, publishjournal.EnvVar+"="+value)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(env, childEnv+"=1", childURL+"="+db.URL)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	require.NoError(t, err, out)
	require.Equal(t, "published\n", out)
	require.Empty(t, read(t, db.Pool), "unset: no journal")

	out, err = run("true")
	require.NoError(t, err, out)
	require.Len(t, read(t, db.Pool), 1, "true: journaled")

	out, err = run("maybe")
	require.Error(t, err)
	require.Contains(t, out, `publishjournal: FERRY_PUBLISH_JOURNAL="maybe": want a boolean such as 1 or true`)
	require.NotContains(t, out, "published")
}
