// Command embedder is the service release-check builds as a new module that
// requires the library at the release version: it runs the producer of
// docs/producing.md against FERRY_POSTGRES_URL (migrated by the installed
// ferry) and reads the row back.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-outbox/ferry/outbox"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "embedder: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("FERRY_POSTGRES_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id uuid PRIMARY KEY, total bigint NOT NULL)`); err != nil {
		return err
	}
	id, total := uuid.New(), 4200

	// The producer, as docs/producing.md shows it.
	writer, err := outbox.NewWriter(outbox.Config{}) // once; safe for concurrent use
	if err != nil {
		return err
	}
	var written outbox.Written
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
			return err
		}
		written, err = writer.Write(ctx, tx, outbox.Event{
			AggregateType: "order",
			AggregateID:   id.String(),
			EventType:     "created",
			Payload:       json.RawMessage(`{"total": 4200}`),
		})
		return err
	})
	if err != nil {
		return err
	}

	var aggregate, status string
	if err := pool.QueryRow(ctx, `SELECT aggregate_type || '/' || aggregate_id, status FROM outbox_events WHERE id = $1`, written.ID).
		Scan(&aggregate, &status); err != nil {
		return fmt.Errorf("read back event %s: %w", written.ID, err)
	}
	fmt.Printf("wrote event %s of %s, version %d, status %s\n", written.ID, aggregate, written.AggregateVersion, status)
	return nil
}
