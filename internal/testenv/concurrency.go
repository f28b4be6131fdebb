package testenv

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// WaitForWaiter blocks until another session waits on a lock held by tx's
// transaction (e.g. a concurrent INSERT of the same key), or timeout. Tests
// call it inside a transaction to prove that two of them really overlap. It
// queries through tx itself: the pool's other connections may all be taken
// by the sessions waiting on it. pg_locks, unlike the statistics views, is
// read afresh by every statement of a transaction.
func WaitForWaiter(ctx context.Context, tx pgx.Tx, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var waiting int
		err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'transactionid' AND NOT granted
			  AND transactionid = pg_current_xact_id()::text::xid`).Scan(&waiting)
		if err != nil {
			return err
		}
		if waiting > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("testenv: no other session waited on this transaction within " + timeout.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
