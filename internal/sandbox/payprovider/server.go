package payprovider

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/ferry-outbox/ferry/internal/sandbox/internal/serve"
)

// Fault is what the server does wrong with one request.
type Fault int

// Faults. The "after commit" ones record the charge first, so the provider
// has it while the client cannot know.
const (
	FaultNone Fault = iota
	// FaultRateLimit answers 429 with Retry-After: 1; nothing is recorded.
	FaultRateLimit
	// FaultDropBeforeCommit closes the connection before anything is
	// recorded: the provider never saw the request.
	FaultDropBeforeCommit
	// FaultSlowAfterCommit records, then answers after Config.SlowDelay
	// (set it beyond the client's timeout).
	FaultSlowAfterCommit
	// FaultErrorAfterCommit records, then answers 500.
	FaultErrorAfterCommit
	// FaultDropAfterCommit records, then closes the connection unanswered.
	FaultDropAfterCommit
	// FaultStall keeps the key in flight for Config.SlowDelay before it
	// records and answers; requests with the key meanwhile get 409.
	FaultStall
	// FaultError answers 500 without recording (for lookups: the provider
	// cannot say).
	FaultError
)

var faultNames = map[Fault]string{
	FaultNone: "none", FaultRateLimit: "rate-limit", FaultDropBeforeCommit: "drop-before-commit",
	FaultSlowAfterCommit: "slow-after-commit", FaultErrorAfterCommit: "500-after-commit",
	FaultDropAfterCommit: "drop-after-commit", FaultStall: "stall", FaultError: "500",
}

func (f Fault) String() string { return cmp.Or(faultNames[f], fmt.Sprintf("Fault(%d)", int(f))) }

// Request is what a Faults function sees of a request.
type Request struct {
	Method string
	Path   string
	// Key is the Idempotency-Key (POST) or the idempotency_key looked up
	// (GET); empty otherwise.
	Key string
	// Seen is how many requests with the same method and key came before.
	Seen int
}

// Config configures a Server.
type Config struct {
	// Addr to listen on. Default "127.0.0.1:0" (a free port).
	Addr string
	// KeyTTL is how long a key is remembered. Default 24h.
	KeyTTL time.Duration
	// SlowDelay of FaultSlowAfterCommit and FaultStall. Default 15s.
	SlowDelay time.Duration
	// DeclineAbove: charges above this amount are declined (402). Default
	// 1,000,000.
	DeclineAbove int64
	// Faults picks a fault per request. Default: none. Change it later
	// with SetFaults.
	Faults func(Request) Fault
	// Now is the clock for key expiry. Default time.Now.
	Now func() time.Time
}

// Charge is a charge in the ledger.
type Charge struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Reference      string `json:"reference"`
	Description    string `json:"description,omitempty"`
	Status         string `json:"status"` // succeeded or failed
	FailureCode    string `json:"failure_code,omitempty"`
	AmountRefunded int64  `json:"amount_refunded"`
	IdempotencyKey string `json:"idempotency_key"`
	Created        int64  `json:"created"`
}

// Refund is a refund in the ledger.
type Refund struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Charge         string `json:"charge"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Status         string `json:"status"`
	IdempotencyKey string `json:"idempotency_key"`
	Created        int64  `json:"created"`
}

// Ledger is everything the provider recorded, in order.
type Ledger struct {
	Charges []Charge `json:"charges"`
	Refunds []Refund `json:"refunds"`
}

type entry struct {
	fingerprint string
	created     time.Time
	done        bool
	status      int
	body        []byte
	objectID    string
}

// Server is the sandbox provider. Start it, read its URL, Stop it.
type Server struct {
	cfg Config

	mu       sync.Mutex
	faults   func(Request) Fault
	keys     map[string]*entry
	seen     map[string]int
	ledger   Ledger
	injected map[Fault]int
	posts    int

	srv     *http.Server
	loop    serve.Loop
	stopCtx context.Context
	stopAll context.CancelFunc
}

// New validates cfg.
func New(cfg Config) (*Server, error) {
	cfg.Addr = cmp.Or(cfg.Addr, "127.0.0.1:0")
	cfg.KeyTTL = cmp.Or(cfg.KeyTTL, 24*time.Hour)
	cfg.SlowDelay = cmp.Or(cfg.SlowDelay, 15*time.Second)
	cfg.DeclineAbove = cmp.Or(cfg.DeclineAbove, 1_000_000)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.KeyTTL < 0:
		return nil, fmt.Errorf("payprovider: Config.KeyTTL %s must be positive", cfg.KeyTTL)
	case cfg.SlowDelay < 0:
		return nil, fmt.Errorf("payprovider: Config.SlowDelay %s must be positive", cfg.SlowDelay)
	}
	s := &Server{loop: serve.Loop{Name: "payprovider"}, cfg: cfg, faults: cfg.Faults, keys: map[string]*entry{}, seen: map[string]int{}, injected: map[Fault]int{}}
	s.stopCtx, s.stopAll = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", s.createCharge)
	mux.HandleFunc("POST /v1/refunds", s.createRefund)
	mux.HandleFunc("GET /v1/charges", s.listCharges)
	mux.HandleFunc("GET /v1/refunds", s.listRefunds)
	mux.HandleFunc("GET /v1/ledger", s.serveLedger)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// Start listens and serves in the background; it returns once the address
// is bound.
func (s *Server) Start(ctx context.Context) error {
	return s.loop.Start(ctx, s.cfg.Addr, s.srv.Serve)
}

// Stop closes the listener and every connection (slow responses are cut
// short) and waits for the server to finish. Safe to call twice.
func (s *Server) Stop() {
	s.loop.Stop(func() {
		s.stopAll()
		_ = s.srv.Close()
	})
}

// URL is the base URL, e.g. http://127.0.0.1:41234.
func (s *Server) URL() string { return "http://" + s.loop.Addr() }

// SetFaults replaces the fault function (nil: none).
func (s *Server) SetFaults(f func(Request) Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Ledger returns a copy of what the provider recorded.
func (s *Server) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Ledger{Charges: slices.Clone(s.ledger.Charges), Refunds: slices.Clone(s.ledger.Refunds)}
}

// Injected counts the faults injected so far, by kind.
func (s *Server) Injected() map[Fault]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.injected)
}

// Posts counts POST requests with a key and a well-formed body (charges
// and refunds, replays included): the requests idempotency applies to.
func (s *Server) Posts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts
}
