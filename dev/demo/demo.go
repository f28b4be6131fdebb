package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-outbox/ferry/outbox"
)

const sqlCreateOrders = `CREATE TABLE IF NOT EXISTS demo_orders (
    id          uuid        PRIMARY KEY,
    customer    text        NOT NULL,
    total_cents integer     NOT NULL,
    status      text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
)`

// Producer writes demo orders and their events.
type Producer struct {
	Pool   *pgxpool.Pool
	Writer *outbox.Writer
	Out    io.Writer
	// Every is the pause between transactions.
	Every time.Duration
}

// Run writes until ctx ends: mostly new orders (order.created), sometimes a
// payment of an earlier order (order.paid), each with its business row
// change in the same transaction.
func (p *Producer) Run(ctx context.Context) error {
	if _, err := p.Pool.Exec(ctx, sqlCreateOrders); err != nil {
		return fmt.Errorf("create demo_orders: %w", err)
	}
	var unpaid []uuid.UUID
	t := time.NewTicker(p.Every)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var err error
		if len(unpaid) > 0 && rand.IntN(3) == 0 {
			id := unpaid[0]
			unpaid = unpaid[1:]
			err = p.pay(ctx, id)
		} else {
			var id uuid.UUID
			id, err = p.create(ctx, n)
			if err == nil {
				unpaid = append(unpaid, id)
			}
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(p.Out, "demo producer: %v (retrying)\n", err)
		}
	}
}

func (p *Producer) create(ctx context.Context, n int) (uuid.UUID, error) {
	id, _ := uuid.NewV7()
	customer := "customer-" + strconv.Itoa(1+rand.IntN(20))
	total := 500 + rand.IntN(20000)
	var w outbox.Written
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO demo_orders (id, customer, total_cents, status) VALUES ($1, $2, $3, 'created')`, id, customer, total); err != nil {
			return err
		}
		// amount, currency and email feed the dev routes' charge and
		// confirmation e-mail (docs/side-effects.md).
		payload, _ := json.Marshal(map[string]any{"order_id": id, "customer": customer, "total_cents": total,
			"amount": total, "currency": "eur", "email": customer + "@example.com"})
		var err error
		w, err = p.Writer.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: id.String(), EventType: "created", Payload: payload})
		return err
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("create order: %w", err)
	}
	fmt.Fprintf(p.Out, "→ committed  order %s  created  v%d  event %s\n", short(id.String()), w.AggregateVersion, short(w.ID.String()))
	return id, nil
}

func (p *Producer) pay(ctx context.Context, id uuid.UUID) error {
	var w outbox.Written
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE demo_orders SET status = 'paid' WHERE id = $1`, id); err != nil {
			return err
		}
		var err error
		w, err = p.Writer.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: id.String(), EventType: "paid", Payload: json.RawMessage(`{"order_id":"` + id.String() + `"}`)})
		return err
	})
	if err != nil {
		return fmt.Errorf("pay order: %w", err)
	}
	fmt.Fprintf(p.Out, "→ committed  order %s  paid     v%d  event %s\n", short(id.String()), w.AggregateVersion, short(w.ID.String()))
	return nil
}

func short(s string) string {
	if len(s) > 13 {
		return "…" + s[len(s)-12:]
	}
	return s
}
