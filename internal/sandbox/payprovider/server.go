package payprovider

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
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
	s := &Server{cfg: cfg, faults: cfg.Faults, keys: map[string]*entry{}, seen: map[string]int{}, injected: map[Fault]int{}}
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
	if err := s.loop.Start(ctx, s.cfg.Addr, s.srv.Serve); err != nil {
		return fmt.Errorf("payprovider: %w", err)
	}
	return nil
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
	out := make(map[Fault]int, len(s.injected))
	for f, n := range s.injected {
		out[f] = n
	}
	return out
}

// Posts counts POST requests with a key and a well-formed body (charges
// and refunds, replays included): the requests idempotency applies to.
func (s *Server) Posts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts
}

type chargeParams struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Reference   string `json:"reference"`
	Description string `json:"description,omitempty"`
}

type refundParams struct {
	Charge string `json:"charge"`
	Amount int64  `json:"amount"`
}

type apiError struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Charge  string `json:"charge,omitempty"`
}

var currencyCode = regexp.MustCompile(`^[a-z]{3}$`)

func (s *Server) createCharge(w http.ResponseWriter, r *http.Request) {
	var p chargeParams
	s.idempotent(w, r, &p, func() (int, any, string) {
		switch {
		case p.Amount <= 0:
			return http.StatusBadRequest, errBody("invalid_request_error", "parameter_invalid_integer", "amount must be a positive integer"), ""
		case !currencyCode.MatchString(p.Currency):
			return http.StatusBadRequest, errBody("invalid_request_error", "parameter_invalid", "currency must be a three-letter ISO code in lower case"), ""
		}
		c := Charge{
			ID: fmt.Sprintf("ch_%06d", len(s.ledger.Charges)+1), Object: "charge", Amount: p.Amount, Currency: p.Currency,
			Reference: p.Reference, Description: p.Description, Status: "succeeded",
			IdempotencyKey: r.Header.Get("Idempotency-Key"), Created: s.cfg.Now().Unix(),
		}
		if p.Amount > s.cfg.DeclineAbove {
			c.Status, c.FailureCode = "failed", "card_declined"
			s.ledger.Charges = append(s.ledger.Charges, c)
			e := errBody("card_error", "card_declined", "Your card was declined.")
			e["error"].Charge = c.ID
			return http.StatusPaymentRequired, e, c.ID
		}
		s.ledger.Charges = append(s.ledger.Charges, c)
		return http.StatusOK, c, c.ID
	})
}

func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	var p refundParams
	s.idempotent(w, r, &p, func() (int, any, string) {
		i := slices.IndexFunc(s.ledger.Charges, func(c Charge) bool { return c.ID == p.Charge })
		if i < 0 {
			return http.StatusBadRequest, errBody("invalid_request_error", "resource_missing", "no such charge: "+p.Charge), ""
		}
		c := &s.ledger.Charges[i]
		amount := cmp.Or(p.Amount, c.Amount-c.AmountRefunded)
		switch {
		case c.Status != "succeeded":
			return http.StatusBadRequest, errBody("invalid_request_error", "charge_not_succeeded", "charge "+c.ID+" did not succeed"), ""
		case amount <= 0 || amount > c.Amount-c.AmountRefunded:
			return http.StatusBadRequest, errBody("invalid_request_error", "amount_too_large", "refund exceeds what is left of "+c.ID), ""
		}
		c.AmountRefunded += amount
		rf := Refund{
			ID: fmt.Sprintf("re_%06d", len(s.ledger.Refunds)+1), Object: "refund", Charge: c.ID, Amount: amount,
			Currency: c.Currency, Status: "succeeded", IdempotencyKey: r.Header.Get("Idempotency-Key"), Created: s.cfg.Now().Unix(),
		}
		s.ledger.Refunds = append(s.ledger.Refunds, rf)
		return http.StatusOK, rf, rf.ID
	})
}

// idempotent runs one POST under its Idempotency-Key: replay, 409, 422, or
// process (with the request's fault) and store.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, params any, process func() (int, any, string)) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 {
		writeJSON(w, http.StatusBadRequest, errBody("invalid_request_error", "idempotency_key_missing", "an Idempotency-Key header of 1 to 255 characters is required"), false)
		return
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(params); err != nil {
		writeJSON(w, http.StatusBadRequest, errBody("invalid_request_error", "parameter_invalid", "body: "+err.Error()), false)
		return
	}
	canon, _ := json.Marshal(params)
	fp := r.URL.Path + " " + string(canon)

	s.mu.Lock()
	s.posts++
	fault := s.pick(Request{Method: r.Method, Path: r.URL.Path, Key: key})
	switch fault {
	case FaultRateLimit:
		s.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusTooManyRequests, errBody("rate_limit_error", "rate_limit", "too many requests"), false)
		return
	case FaultDropBeforeCommit:
		s.mu.Unlock()
		drop(w)
		return
	}
	e := s.entry(key)
	if e != nil {
		s.mu.Unlock()
		switch {
		case e.fingerprint != fp:
			writeJSON(w, http.StatusUnprocessableEntity, errBody("idempotency_error", "idempotency_key_mismatch",
				"Keys for idempotent requests can only be used with the same parameters they were first used with."), false)
		case !e.done:
			writeJSON(w, http.StatusConflict, errBody("idempotency_error", "request_in_progress",
				"There is currently another in-progress request using this Idempotency-Key."), false)
		default:
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(e.status)
			_, _ = w.Write(e.body)
		}
		return
	}
	e = &entry{fingerprint: fp, created: s.cfg.Now()}
	s.keys[key] = e
	s.mu.Unlock()

	if fault == FaultStall {
		// In flight: concurrent requests with the key get 409. Not cut
		// short by the client going away, as a real provider would not be.
		s.wait(context.Background())
	}

	s.mu.Lock()
	status, body, objectID := process()
	if status == http.StatusBadRequest {
		// Validation failures are not stored: the key stays unused.
		delete(s.keys, key)
		s.mu.Unlock()
		writeJSON(w, status, body, false)
		return
	}
	raw, _ := json.Marshal(body)
	e.done, e.status, e.body, e.objectID = true, status, raw, objectID
	s.mu.Unlock()

	switch fault {
	case FaultSlowAfterCommit:
		s.wait(r.Context())
	case FaultErrorAfterCommit:
		writeJSON(w, http.StatusInternalServerError, errBody("api_error", "internal", "internal error"), false)
		return
	case FaultDropAfterCommit:
		drop(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}

// entry returns the live entry of key, forgetting it once expired. Caller
// holds s.mu.
func (s *Server) entry(key string) *entry {
	e := s.keys[key]
	if e != nil && s.cfg.Now().Sub(e.created) > s.cfg.KeyTTL {
		delete(s.keys, key)
		return nil
	}
	return e
}

// pick chooses and counts the fault of a request. Caller holds s.mu.
func (s *Server) pick(req Request) Fault {
	seenKey := req.Method + " " + req.Key
	req.Seen = s.seen[seenKey]
	s.seen[seenKey]++
	if s.faults == nil {
		return FaultNone
	}
	f := s.faults(req)
	if f != FaultNone {
		s.injected[f]++
	}
	return f
}

func (s *Server) wait(ctx context.Context) {
	t := time.NewTimer(s.cfg.SlowDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-s.stopCtx.Done():
	}
}

func (s *Server) listCharges(w http.ResponseWriter, r *http.Request) {
	s.list(w, r, func(e *entry) any {
		for _, c := range s.ledger.Charges {
			if c.ID == e.objectID {
				return c
			}
		}
		return nil
	}, func(ref string) []any {
		var out []any
		for _, c := range s.ledger.Charges {
			if c.Reference == ref {
				out = append(out, c)
			}
		}
		return out
	})
}

func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	s.list(w, r, func(e *entry) any {
		for _, rf := range s.ledger.Refunds {
			if rf.ID == e.objectID {
				return rf
			}
		}
		return nil
	}, nil)
}

// list answers a lookup by idempotency key (within the key's retention;
// 409 while in flight) or by reference (forever).
func (s *Server) list(w http.ResponseWriter, r *http.Request, byKey func(*entry) any, byRef func(string) []any) {
	key, ref := r.URL.Query().Get("idempotency_key"), r.URL.Query().Get("reference")
	s.mu.Lock()
	fault := s.pick(Request{Method: r.Method, Path: r.URL.Path, Key: key})
	switch fault {
	case FaultNone, FaultRateLimit, FaultStall, FaultSlowAfterCommit:
	case FaultDropBeforeCommit, FaultDropAfterCommit:
		s.mu.Unlock()
		drop(w)
		return
	default:
		s.mu.Unlock()
		writeJSON(w, http.StatusInternalServerError, errBody("api_error", "internal", "internal error"), false)
		return
	}
	data := []any{}
	switch {
	case key != "":
		e := s.entry(key)
		if e != nil && !e.done {
			s.mu.Unlock()
			writeJSON(w, http.StatusConflict, errBody("idempotency_error", "request_in_progress", "a request with this key is in progress"), false)
			return
		}
		if e != nil {
			if obj := byKey(e); obj != nil {
				data = append(data, obj)
			}
		}
	case ref != "" && byRef != nil:
		data = append(data, byRef(ref)...)
	default:
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, errBody("invalid_request_error", "parameter_missing", "give idempotency_key or reference"), false)
		return
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data}, false)
}

func (s *Server) serveLedger(w http.ResponseWriter, _ *http.Request) {
	l := s.Ledger()
	if l.Charges == nil {
		l.Charges = []Charge{}
	}
	if l.Refunds == nil {
		l.Refunds = []Refund{}
	}
	writeJSON(w, http.StatusOK, l, true)
}

func errBody(typ, code, msg string) map[string]*apiError {
	return map[string]*apiError{"error": {Type: typ, Code: code, Message: msg}}
}

func writeJSON(w http.ResponseWriter, status int, v any, indent bool) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if indent {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		// RST rather than FIN: a reset mid-response, as a crashed proxy
		// would leave it.
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
