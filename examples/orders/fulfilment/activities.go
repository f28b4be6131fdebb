package fulfilment

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"
)

// ErrTypeNotPaid: MarkFulfilling found no paid (or fulfilling) order of
// that id. Not retried: the row will not change its mind.
const ErrTypeNotPaid = "NotPaid"

// Activities are the fulfilment's effects on the orders table.
type Activities struct {
	pool *pgxpool.Pool
}

// NewActivities builds the activities over the service's pool.
func NewActivities(pool *pgxpool.Pool) (*Activities, error) {
	if pool == nil {
		return nil, errors.New("fulfilment: the pool is nil")
	}
	return &Activities{pool: pool}, nil
}

// sqlMarkFulfilling moves a paid order on. A fulfilling order matches too,
// so that a retry of an attempt whose UPDATE committed succeeds again.
const sqlMarkFulfilling = `UPDATE orders SET status = 'fulfilling' WHERE id = $1 AND status IN ('paid', 'fulfilling')`

// MarkFulfilling sets the order's status to fulfilling; idempotent.
func (a *Activities) MarkFulfilling(ctx context.Context, in MarkInput) error {
	tag, err := a.pool.Exec(ctx, sqlMarkFulfilling, in.OrderID)
	if err != nil {
		return fmt.Errorf("mark order %s fulfilling: %w", in.OrderID, err)
	}
	if tag.RowsAffected() == 0 {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("mark order %s fulfilling: no paid order of that id", in.OrderID), ErrTypeNotPaid, nil)
	}
	return nil
}
