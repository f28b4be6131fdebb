// Package orders is an example service that embeds Ferry: an HTTP handler
// writes an order and its order.created event in one transaction, and the
// same process runs Ferry's poller and worker (fx modules ferry.Poller and
// ferry.Worker) to relay the event to RabbitMQ through Temporal.
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
}

// ConfigFromEnv reads ORDERS_HTTP_ADDRESS and Ferry's FERRY_* variables.
func ConfigFromEnv() Config {
	return Config{
		HTTPAddress: os.Getenv("ORDERS_HTTP_ADDRESS"),
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
// Ferry's poller and worker, the orders table, and the HTTP server
// (POST /orders, and GET /metrics with Ferry's series beside the service's).
func Options(cfg Config) fx.Option {
	return fx.Options(
		fx.Supply(cfg, cfg.Ferry, cfg.Postgres, cfg.Temporal),
		ferry.Postgres, ferry.Temporal, // the service's pool and client
		ferry.Metrics,              // Ferry's series on the service's registry
		ferry.Poller, ferry.Worker, // the embedded relay
		fx.Invoke(migrate),
		fx.Provide(newRegistry, NewService, newServer),
		fx.Invoke(func(*Server) {}),
	)
}

// sqlCreateOrders is the service's own table; Ferry's tables come from
// schema.Migrate.
const sqlCreateOrders = `
CREATE TABLE IF NOT EXISTS orders (
    id          uuid        PRIMARY KEY,
    customer    text        NOT NULL,
    total_cents bigint      NOT NULL CHECK (total_cents > 0),
    created_at  timestamptz NOT NULL DEFAULT now()
)`

// migrate runs before anything starts: fx calls invokes in fx.New, and the
// poller and worker start only in app.Start.
func migrate(pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := schema.Migrate(ctx, pool, nil); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, sqlCreateOrders); err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	return nil
}

// Service writes orders.
type Service struct {
	pool   *pgxpool.Pool
	writer *outbox.Writer
}

// NewService builds the service over the pool.
func NewService(pool *pgxpool.Pool) (*Service, error) {
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		return nil, err
	}
	return &Service{pool: pool, writer: w}, nil
}

// NewOrder is the body of POST /orders.
type NewOrder struct {
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
}

// Created is the answer to POST /orders.
type Created struct {
	OrderID    string `json:"order_id"`
	EventID    string `json:"event_id"`
	WorkflowID string `json:"workflow_id"`
}

// OrderCreated is the payload of the order.created event.
type OrderCreated struct {
	OrderID    string `json:"order_id"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
}

// ErrInvalidOrder: the request is wrong; nothing was written.
var ErrInvalidOrder = errors.New("invalid order")

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
			AggregateType: "order",
			AggregateID:   id.String(),
			EventType:     "created",
			Payload:       payload,
		})
		return err
	})
	if err != nil {
		return Created{}, err
	}
	return Created{OrderID: id.String(), EventID: written.ID.String(), WorkflowID: workflows.WorkflowID("order", id.String())}, nil
}

// ServeHTTP handles POST /orders.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(created)
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
