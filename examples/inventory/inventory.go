package inventory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferry-outbox/ferry/consumer"
	"github.com/ferry-outbox/ferry/inbox"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/redact"
	"github.com/ferry-outbox/ferry/upcast"
)

// Names of the example's consumer and queue.
const (
	ConsumerName = "inventory"
	DefaultQueue = "inventory.orders"
)

const sqlCreateReservations = `CREATE TABLE IF NOT EXISTS inventory_reservations (
    order_id    text        PRIMARY KEY,
    customer    text        NOT NULL,
    units       integer     NOT NULL,
    status      text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
)`

// Config configures Run.
type Config struct {
	// PostgresURL of the inventory's database (here, the demo's). Required.
	PostgresURL string
	// AMQPURL of the broker. Required.
	AMQPURL string
	// Exchange Ferry publishes to. Default "ferry.events".
	Exchange string
	// Queue to consume. Default DefaultQueue.
	Queue string
	// Out receives one line per delivery.
	Out io.Writer
	// ResendEvery, when above zero, sends a copy of every n-th applied
	// message back to the queue, as the broker does after a consumer dies
	// between its commit and its ack, so the deduplication shows.
	ResendEvery int
	// Logger for the consumer's own log lines; default slog.Default().
	Logger *slog.Logger
	// Redact masks sensitive payload fields in the printed lines, park
	// reasons and log lines. Default nil: nothing is masked.
	Redact *redact.Redactor
	// Metrics counts the consumer's outcomes, lag and queue depth.
	// Default nil: nothing is counted.
	Metrics *metrics.Consumer
}

// created is the order.created payload, schema version 2. Version 1 (the
// demo producer's) lacks units; the upcaster derives them from the total.
type created struct {
	OrderID    string `json:"order_id"`
	Customer   string `json:"customer"`
	TotalCents int    `json:"total_cents"`
	Units      int    `json:"units"`
}

// Schemas is the example's registry: order "created" is read at schema
// version 2, and version 1 is lifted by adding units.
func Schemas() (*upcast.Registry, error) {
	r := upcast.NewRegistry()
	err := r.Register("created", 2, upcast.Step{From: 1, Fn: func(p []byte) ([]byte, error) {
		var c created
		if err := json.Unmarshal(p, &c); err != nil {
			return nil, fmt.Errorf("order.created v1: %w", err)
		}
		c.Units = 1 + c.TotalCents/2500 // one unit per started 25.00
		return json.Marshal(c)
	}})
	return r, err
}

// Handle applies one event in the inbox's transaction.
func Handle(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
	switch ev.EventType {
	case "created":
		var c created
		if err := json.Unmarshal(ev.Payload, &c); err != nil {
			return fmt.Errorf("decode order.created: %w", err)
		}
		// A plain INSERT, not an upsert: if the inbox ever let an event
		// through twice, the primary key would say so loudly.
		_, err := tx.Exec(ctx, `INSERT INTO inventory_reservations (order_id, customer, units, status)
			VALUES ($1, $2, $3, 'reserved')`, c.OrderID, c.Customer, c.Units)
		return err
	case "paid":
		tag, err := tx.Exec(ctx, `UPDATE inventory_reservations SET status = 'confirmed', updated_at = now()
			WHERE order_id = $1 AND status = 'reserved'`, ev.AggregateID)
		if err == nil && tag.RowsAffected() != 1 {
			// Per-aggregate ordering applies created (v1) before paid (v2),
			// so this means the data is not what the example expects.
			return fmt.Errorf("order %s: no reserved stock to confirm", ev.AggregateID)
		}
		return err
	}
	return nil
}

// Run migrates, consumes until ctx ends, then stops gracefully.
func Run(ctx context.Context, cfg Config) error {
	cfg.Exchange = cmp.Or(cfg.Exchange, "ferry.events")
	cfg.Queue = cmp.Or(cfg.Queue, DefaultQueue)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	pool, err := pgxpool.New(ctx, cfg.PostgresURL)
	if err != nil {
		return fmt.Errorf("inventory: open pool: %w", err)
	}
	defer pool.Close()
	if _, err := inbox.Migrate(ctx, pool, nil); err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	if _, err := pool.Exec(ctx, sqlCreateReservations); err != nil {
		return fmt.Errorf("inventory: create inventory_reservations: %w", err)
	}
	in, err := inbox.New(inbox.Config{Pool: pool, Consumer: ConsumerName})
	if err != nil {
		return err
	}
	schemas, err := Schemas()
	if err != nil {
		return err
	}
	cleaner, err := inbox.NewCleaner(inbox.CleanerConfig{Pool: pool, Consumer: ConsumerName, Logger: cfg.Logger, Metrics: cfg.Metrics})
	if err != nil {
		return err
	}

	p := &printer{out: cfg.Out, every: cfg.ResendEvery, amqpURL: cfg.AMQPURL, queue: cfg.Queue, redact: cfg.Redact}
	defer p.close()
	c, err := consumer.New(consumer.Config{
		URL:      cfg.AMQPURL,
		Queue:    cfg.Queue,
		Exchange: cfg.Exchange,
		Bindings: []string{"order.created", "order.paid"},
		Inbox:    in,
		Handler:  Handle,
		Schemas:  schemas,
		OnResult: p.print,
		Logger:   cfg.Logger,
		Redact:   cfg.Redact,
		Metrics:  cfg.Metrics,
	})
	if err != nil {
		return err
	}
	if err := c.Declare(ctx); err != nil {
		return err
	}
	if err := cleaner.Start(ctx); err != nil {
		return err
	}
	defer cleaner.Stop()
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	c.Stop()
	s := c.Stats()
	fmt.Fprintf(cfg.Out, "inventory: stopped after %d applied, %d duplicates, %d stale, %d parked, %d quarantined\n",
		s.Applied, s.Duplicates, s.Stale, s.Parked, s.Quarantined)
	return nil
}

// printer prints outcomes and, in the demo, re-sends some messages.
type printer struct {
	out     io.Writer
	every   int
	amqpURL string
	queue   string
	redact  *redact.Redactor
	applied atomic.Int64

	// OnResult runs on several workers at once.
	mu   sync.Mutex
	conn *amqp.Connection // dialled on the first re-send
	ch   *amqp.Channel
}

func (p *printer) print(r consumer.Result) {
	ev := r.Event
	head := fmt.Sprintf("← %-11s order %s  %-8s v%d", r.Outcome, short(ev.AggregateID), ev.EventType, ev.AggregateVersion)
	switch r.Outcome {
	case consumer.Applied:
		what := "reservation confirmed"
		if ev.EventType == "created" {
			var c created
			_ = json.Unmarshal(ev.Payload, &c)
			what = fmt.Sprintf("reserved %d unit(s) for %s", c.Units, c.Customer)
		}
		what = p.redact.Text(ev.AggregateType, ev.EventType, ev.Payload, what)
		fmt.Fprintf(p.out, "%s  %s\n", head, what)
		if p.every > 0 && p.applied.Add(1)%int64(p.every) == 0 {
			p.resend(r.Delivery)
		}
	case consumer.Duplicate:
		fmt.Fprintf(p.out, "%s  event %s was already applied: acked, no effect\n", head, short(ev.ID))
	default:
		fmt.Fprintf(p.out, "%s  %s\n", head, r.Reason)
	}
}

// resend publishes a copy of d to the queue. It runs on the consumer's
// worker, one at a time per aggregate; a failure only costs the demo.
func (p *printer) resend(d amqp.Delivery) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil || p.ch.IsClosed() {
		p.closeLocked()
		conn, err := amqp.DialConfig(p.amqpURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			return
		}
		ch, err := conn.Channel()
		if err != nil {
			_ = conn.Close()
			return
		}
		p.conn, p.ch = conn, ch
	}
	err := p.ch.Publish("", p.queue, false, false, amqp.Publishing{
		Headers: d.Headers, ContentType: d.ContentType, DeliveryMode: amqp.Persistent,
		MessageId: d.MessageId, Type: d.Type, Timestamp: d.Timestamp, Body: d.Body,
	})
	if err == nil {
		fmt.Fprintf(p.out, "  (demo) sent event %s again, as the broker would after a crash between commit and ack\n", short(d.MessageId))
	}
}

func (p *printer) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
}

func (p *printer) closeLocked() {
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn, p.ch = nil, nil
	}
}

func short(s string) string {
	if len(s) > 13 {
		return "…" + s[len(s)-12:]
	}
	return s
}
