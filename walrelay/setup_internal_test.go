package walrelay

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
)

// Relays starting together all find the publication one of them created:
// whichever error the losers' CREATE PUBLICATION meets (duplicate_object,
// or unique_violation on the catalog while the winner's transaction was
// open), none fails.
func TestConcurrentStartsShareThePublication(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	ctx := context.Background()
	for round := range 5 {
		name := ferrytest.Name("pub_race")
		t.Cleanup(func() {
			_, _ = db.Pool.Exec(context.Background(), `DROP PUBLICATION IF EXISTS `+pgx.Identifier{name}.Sanitize())
		})
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() { errs[i] = ensurePublication(ctx, db.Pool, name) })
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d, relay %d", round, i)
		}
	}
}
