//go:build !failpoints

package publishjournal_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/internal/publishjournal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Without the build tag the hooks do nothing, even with the variable set
// and the table there: no production binary writes a journal.
func TestInertWithoutTheTag(t *testing.T) {
	require.False(t, publishjournal.Enabled)
	t.Setenv(publishjournal.EnvVar, "1")
	require.Equal(t, "1", os.Getenv(publishjournal.EnvVar))
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	require.NoError(t, publishjournal.CreateTable(ctx, db.Pool))
	var none error
	publishjournal.Relay(ctx, db.Pool, "poller-0", "order", "A", 1, 1, 1, time.Now()).End(&none)
	publishjournal.Run(ctx, db.Pool, "order", "A", 2, 2, 2).End(nil)
	recs, err := publishjournal.Read(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, recs)
}
