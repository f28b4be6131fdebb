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
	"time"
)

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
		return find(s.ledger.Charges, func(c Charge) bool { return c.ID == e.objectID })
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
		return find(s.ledger.Refunds, func(rf Refund) bool { return rf.ID == e.objectID })
	}, nil)
}

// find returns the first of xs that matches, or nil.
func find[T any](xs []T, match func(T) bool) any {
	if i := slices.IndexFunc(xs, match); i >= 0 {
		return xs[i]
	}
	return nil
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
