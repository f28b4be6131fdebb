package startstop_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/internal/startstop"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type key struct{}

func TestStartRunsUntilStop(t *testing.T) {
	t.Parallel()
	var r startstop.Runner
	started := make(chan context.Context, 1)
	ended := make(chan struct{})

	// Start's ctx ends at once; the loop must outlive it and keep its values.
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	require.NoError(t, r.Start(ctx, func(ctx context.Context) {
		started <- ctx
		<-ctx.Done()
		close(ended)
	}))
	cancel()
	loopCtx := <-started
	require.Equal(t, "v", loopCtx.Value(key{}))
	select {
	case <-ended:
		t.Fatal("the loop ended with Start's context")
	case <-time.After(50 * time.Millisecond):
	}

	require.ErrorIs(t, r.Start(context.Background(), func(context.Context) {}), startstop.ErrStarted)
	require.True(t, r.Stop())
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before the loop did")
	}
	require.True(t, r.Stop(), "a second Stop is harmless")
	require.ErrorIs(t, r.Start(context.Background(), func(context.Context) {}), startstop.ErrStarted, "a Runner starts once")
}

func TestStopWithoutStart(t *testing.T) {
	t.Parallel()
	var r startstop.Runner
	require.False(t, r.Stop())
}
