// Package orders is an example service that embeds Ferry: HTTP handlers
// write an order and its order.created event, or a payment and its
// order.paid event, in one transaction, and the same process runs Ferry's
// poller and worker (fx modules ferry.Poller and ferry.Worker) to relay the
// events to RabbitMQ through Temporal, and to the service's own Fulfilment
// workflow (package fulfilment), which Ferry starts on order.created and
// signals on order.paid.
//
// See README.md beside this file for a walk from curl to the message.
package orders

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/examples/orders/fulfilment"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/schema"
	"github.com/ferry-outbox/ferry/workflows"
)

// Config is the service's configuration.
type Config struct {
	// HTTPAddress to listen on; default 127.0.0.1:8080.
	HTTPAddress string
	// Ferry is the embedded relay's configuration.
	Ferry ferry.Config
	// Postgres and Temporal are the connections' (ferry.Postgres and
	// ferry.Temporal build them; a service that has a pool and a client
	// already provides its own).
	Postgres ferry.PostgresConfig
	Temporal ferry.TemporalConfig
	// Fulfilment is the fulfilment worker's; its task queue (default
	// "orders-fulfilment") is the service's own, not Ferry's.
	Fulfilment fulfilment.Config
}

// ConfigFromEnv reads ORDERS_HTTP_ADDRESS, ORDERS_FULFILMENT_TASK_QUEUE
// and Ferry's FERRY_* variables.
func ConfigFromEnv() Config {
	return Config{
		HTTPAddress: os.Getenv("ORDERS_HTTP_ADDRESS"),
		Fulfilment:  fulfilment.Config{TaskQueue: os.Getenv("ORDERS_FULFILMENT_TASK_QUEUE")},
		Ferry: ferry.Config{
			AMQPURL:   os.Getenv("FERRY_AMQP_URL"),
			Namespace: os.Getenv("FERRY_TEMPORAL_NAMESPACE"),
			TaskQueue: os.Getenv("FERRY_TASK_QUEUE"),
			Exchange:  os.Getenv("FERRY_EXCHANGE"),
		},
		Postgres: ferry.PostgresConfig{URL: os.Getenv("FERRY_POSTGRES_URL")},
		Temporal: ferry.TemporalConfig{
			Address:   os.Getenv("FERRY_TEMPORAL_ADDRESS"),
			Namespace: os.Getenv("FERRY_TEMPORAL_NAMESPACE"),
			APIKey:    os.Getenv("FERRY_TEMPORAL_API_KEY"),
		},
	}
}

// Options is the whole service: a PostgreSQL pool and a Temporal client
// from the Ferry config (a service that has them already provides its own),
// Ferry's poller and worker with the fulfilment routes added to
// cfg.Ferry.Destinations, the fulfilment worker, the orders table, and the
// HTTP server (POST /orders, POST /orders/{id}/pay, and GET /metrics with
// Ferry's series beside the service's).
func Options(cfg Config) fx.Option {
	cfg.Fulfilment = cfg.Fulfilment.WithDefaults()
	// The start route names the fulfilment worker's task queue, so both
	// come from the same value.
	cfg.Ferry.Destinations = append(slices.Clip(cfg.Ferry.Destinations), fulfilment.Routes(cfg.Fulfilment.TaskQueue)...)
	return fx.Options(
		fx.Supply(cfg, cfg.Ferry, cfg.Postgres, cfg.Temporal, cfg.Fulfilment),
		ferry.Postgres, ferry.Temporal, // the service's pool and client
		ferry.Metrics,              // Ferry's series on the service's registry
		ferry.Poller, ferry.Worker, // the embedded relay
		fulfilment.Module, // the service's own workflow, on its own task queue
		fx.Invoke(migrate),
		fx.Provide(newRegistry, NewService, newServer),
		fx.Invoke(func(*Server) {}),
	)
}

// sqlCreateOrders is the service's own table; Ferry's tables come from
// schema.Migrate. status moves created → paid (Service.Pay) → fulfilling
// (the Fulfilment workflow's activity).
const sqlCreateOrders = `
CREATE TABLE IF NOT EXISTS orders (
    id          uuid        PRIMARY KEY,
    customer    text        NOT NULL,
    total_cents bigint      NOT NULL CHECK (total_cents > 0),
    status      text        NOT NULL DEFAULT 'created' CHECK (status IN ('created', 'paid', 'fulfilling')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    paid_at     timestamptz
)`

// Migrate applies Ferry's migrations and creates the orders table; the
// service runs it before anything starts, a test before it writes.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := schema.Migrate(ctx, pool, nil); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, sqlCreateOrders); err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	return nil
}

// migrate runs before anything starts: fx calls invokes in fx.New, and the
// poller and worker start only in app.Start.
func migrate(pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Migrate(ctx, pool)
}

// Service writes orders and their payments.
type Service struct {
	pool   *pgxpool.Pool
	writer *outbox.Writer
	mux    *http.ServeMux
}

// NewService builds the service over the pool.
func NewService(pool *pgxpool.Pool) (*Service, error) {
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		return nil, err
	}
	s := &Service{pool: pool, writer: w, mux: http.NewServeMux()}
	s.mux.HandleFunc("/orders", s.serveCreate)
	s.mux.HandleFunc("/orders/{id}/pay", s.servePay)
	return s, nil
}

// NewOrder is the body of POST /orders.
type NewOrder struct {
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
}

// Created is the answer to POST /orders.
type Created struct {
	OrderID string `json:"order_id"`
	EventID string `json:"event_id"`
	// WorkflowID is Ferry's aggregate workflow of the order.
	WorkflowID string `json:"workflow_id"`
	// FulfilmentID is the order's Fulfilment workflow, which Ferry starts
	// once the order is committed.
	FulfilmentID string `json:"fulfilment_id"`
}

// Paid is the answer to POST /orders/{id}/pay.
type Paid struct {
	OrderID      string `json:"order_id"`
	EventID      string `json:"event_id"`
	FulfilmentID string `json:"fulfilment_id"`
}

// OrderCreated is the payload of the order.created event.
type OrderCreated struct {
	OrderID    string `json:"order_id"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
}

// OrderPaid is the payload of the order.paid event.
type OrderPaid struct {
	OrderID    string `json:"order_id"`
	TotalCents int64  `json:"total_cents"`
}

// Errors of the service's writes; each means nothing was written.
var (
	// ErrInvalidOrder: the request is wrong.
	ErrInvalidOrder = errors.New("invalid order")
	// ErrOrderNotFound: no order has that id.
	ErrOrderNotFound = errors.New("no such order")
	// ErrAlreadyPaid: the order was paid before.
	ErrAlreadyPaid = errors.New("order already paid")
)

// AggregateType of the service's events: "order", so routes and routing
// keys read order.created and order.paid.
const AggregateType = "order"

// Create stores the order and its order.created event in one transaction:
// both commit or neither does.
func (s *Service) Create(ctx context.Context, o NewOrder) (Created, error) {
	o.Customer = strings.TrimSpace(o.Customer)
	switch {
	case o.Customer == "" || len(o.Customer) > 200:
		return Created{}, fmt.Errorf("%w: customer must be 1-200 bytes", ErrInvalidOrder)
	case o.TotalCents <= 0:
		return Created{}, fmt.Errorf("%w: total_cents must be positive", ErrInvalidOrder)
	}
	id := uuid.Must(uuid.NewV7())
	payload, err := json.Marshal(OrderCreated{OrderID: id.String(), Customer: o.Customer, TotalCents: o.TotalCents})
	if err != nil {
		return Created{}, err
	}
	var written outbox.Written
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, total_cents) VALUES ($1, $2, $3)`, id, o.Customer, o.TotalCents); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		written, err = s.writer.Write(ctx, tx, outbox.Event{
			AggregateType: AggregateType,
			AggregateID:   id.String(),
			EventType:     "created",
			Payload:       payload,
		})
		return err
	})
	if err != nil {
		return Created{}, err
	}
	return Created{OrderID: id.String(), EventID: written.ID.String(), WorkflowID: workflows.WorkflowID(AggregateType, id.String()),
		FulfilmentID: fulfilment.WorkflowID(id.String())}, nil
}

// sqlPay marks a created order paid; no row comes back for an order that
// does not exist or is paid already (the row lock orders two payments of
// one order: the second sees status paid).
const sqlPay = `UPDATE orders SET status = 'paid', paid_at = now() WHERE id = $1 AND status = 'created' RETURNING total_cents`

// Pay records the order's payment and its order.paid event in one
// transaction: both commit or neither does.
func (s *Service) Pay(ctx context.Context, orderID string) (Paid, error) {
	id, err := uuid.Parse(orderID)
	if err != nil {
		return Paid{}, fmt.Errorf("%w: %q is not an order id", ErrOrderNotFound, orderID)
	}
	var written outbox.Written
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var total int64
		err := tx.QueryRow(ctx, sqlPay, id).Scan(&total)
		if errors.Is(err, pgx.ErrNoRows) {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM orders WHERE id = $1)`, id).Scan(&exists); err != nil {
				return fmt.Errorf("look up order: %w", err)
			}
			if exists {
				return fmt.Errorf("%w: %s", ErrAlreadyPaid, id)
			}
			return fmt.Errorf("%w: %s", ErrOrderNotFound, id)
		}
		if err != nil {
			return fmt.Errorf("mark order paid: %w", err)
		}
		payload, err := json.Marshal(OrderPaid{OrderID: id.String(), TotalCents: total})
		if err != nil {
			return err
		}
		written, err = s.writer.Write(ctx, tx, outbox.Event{
			AggregateType: AggregateType,
			AggregateID:   id.String(),
			EventType:     "paid",
			Payload:       payload,
		})
		return err
	})
	if err != nil {
		return Paid{}, err
	}
	return Paid{OrderID: id.String(), EventID: written.ID.String(), FulfilmentID: fulfilment.WorkflowID(id.String())}, nil
}

// ServeHTTP handles POST /orders and POST /orders/{id}/pay.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

func (s *Service) serveCreate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	var o NewOrder
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		http.Error(w, "body must be JSON like {\"customer\": \"ada\", \"total_cents\": 4200}", http.StatusBadRequest)
		return
	}
	created, err := s.Create(r.Context(), o)
	switch {
	case errors.Is(err, ErrInvalidOrder):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		slog.ErrorContext(r.Context(), "create order", "error", err)
		http.Error(w, "could not store the order", http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusCreated, created)
}

func (s *Service) servePay(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	paid, err := s.Pay(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, ErrOrderNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case errors.Is(err, ErrAlreadyPaid):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case err != nil:
		slog.ErrorContext(r.Context(), "pay order", "error", err)
		http.Error(w, "could not store the payment", http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, paid)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// newRegistry is the service's Prometheus registry: its runtime metrics,
// and Ferry's (ferry.Metrics registers them on the prometheus.Registerer).
func newRegistry() (*prometheus.Registry, prometheus.Registerer) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg, reg
}

// Server is the HTTP server, started and stopped with the app.
type Server struct {
	srv  *http.Server
	addr string
}

// Addr is the address the server listens on (useful with port 0).
func (s *Server) Addr() string { return s.addr }

func newServer(lc fx.Lifecycle, cfg Config, svc *Service, reg *prometheus.Registry) *Server {
	mux := http.NewServeMux()
	mux.Handle("/orders", svc)
	mux.Handle("/orders/", svc)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", cmp.Or(cfg.HTTPAddress, "127.0.0.1:8080"))
			if err != nil {
				return fmt.Errorf("orders: listen: %w", err)
			}
			s.addr = ln.Addr().String()
			go func() { _ = s.srv.Serve(ln) }()
			return nil
		},
		OnStop: s.srv.Shutdown,
	})
	return s
}
