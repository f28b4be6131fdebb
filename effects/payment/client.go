package payment

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Class sorts what became of a request.
type Class int

// Classes of an *Error.
const (
	// ClassNotSent: nothing of the request left this process (dial
	// failed, connection refused). Retryable with the same key.
	ClassNotSent Class = iota + 1
	// ClassUnknown: the request was sent and no answer says what became
	// of it (timeout, 5xx, connection reset mid-response). Reconcile.
	ClassUnknown
	// ClassDeclined: the provider refused the card (402). Permanent.
	ClassDeclined
	// ClassInvalid: the request can never succeed (400, 404 of a
	// resource). Permanent; nothing was recorded.
	ClassInvalid
	// ClassInProgress: another request with the key is in flight (409).
	// Wait and ask again.
	ClassInProgress
	// ClassRateLimited: 429. Wait RetryAfter and ask again.
	ClassRateLimited
	// ClassKeyMismatch: the key was used with other parameters (422). A
	// bug: never retried.
	ClassKeyMismatch
	// ClassUnauthorized: 401/403, the API key is wrong. Nothing was
	// processed; retryable once someone fixes the configuration.
	ClassUnauthorized
)

var classNames = map[Class]string{
	ClassNotSent: "not_sent", ClassUnknown: "unknown", ClassDeclined: "declined", ClassInvalid: "invalid",
	ClassInProgress: "in_progress", ClassRateLimited: "rate_limited", ClassKeyMismatch: "key_mismatch",
	ClassUnauthorized: "unauthorized",
}

func (c Class) String() string { return cmp.Or(classNames[c], "Class("+strconv.Itoa(int(c))+")") }

// Error is a request that did not end in a 2xx answer.
type Error struct {
	Class Class
	// Status is the HTTP status (0 without an answer).
	Status int
	// Code and Message are the provider's, when it said.
	Code    string
	Message string
	// RetryAfter is the provider's Retry-After (429).
	RetryAfter time.Duration
	// Charge is the declined charge's id (402).
	Charge string
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("payment provider: ")
	b.WriteString(e.Class.String())
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d", e.Status)
		if e.Code != "" {
			b.WriteString(" " + e.Code)
		}
		b.WriteString(")")
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ClassOf returns err's class, or 0 when err is not an *Error.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return 0
}

// Config configures a Client.
type Config struct {
	// BaseURL of the API, e.g. http://127.0.0.1:8234. Required.
	BaseURL string
	// APIKey is sent as a bearer token. A secret: never printed. Default:
	// none.
	APIKey string
	// Timeout of one request, from dial to the last byte of the answer.
	// Default 10s.
	Timeout time.Duration
	// Transport; default a clone of http.DefaultTransport.
	Transport http.RoundTripper
}

// Client talks to the payment API. Safe for concurrent use.
type Client struct {
	base    *url.URL
	apiKey  string
	timeout time.Duration
	http    *http.Client
}

// DefaultTimeout is Config.Timeout's default.
const DefaultTimeout = 10 * time.Second

// New validates cfg.
func New(cfg Config) (*Client, error) {
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	if cfg.BaseURL == "" {
		return nil, errors.New("payment: Config.BaseURL is empty")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("payment: Config.BaseURL %q: use http(s)://host[:port]", cfg.BaseURL)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("payment: Config.Timeout %s must be positive", cfg.Timeout)
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	return &Client{base: u, apiKey: cfg.APIKey, timeout: cfg.Timeout, http: &http.Client{Transport: cfg.Transport}}, nil
}

// Charge is a charge as the provider returns it.
type Charge struct {
	ID             string `json:"id"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Reference      string `json:"reference"`
	Status         string `json:"status"` // succeeded or failed
	FailureCode    string `json:"failure_code,omitempty"`
	AmountRefunded int64  `json:"amount_refunded"`
	IdempotencyKey string `json:"idempotency_key"`
}

// Refund is a refund as the provider returns it.
type Refund struct {
	ID             string `json:"id"`
	Charge         string `json:"charge"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Status         string `json:"status"`
	IdempotencyKey string `json:"idempotency_key"`
}

// ChargeParams create a charge.
type ChargeParams struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Reference   string `json:"reference"`
	Description string `json:"description,omitempty"`
}

// RefundParams create a refund (Amount 0: what is left of the charge).
type RefundParams struct {
	Charge string `json:"charge"`
	Amount int64  `json:"amount,omitempty"`
}

// Replayed says the provider answered from its idempotency store.
type Replayed bool

// CreateCharge charges with key. A declined card is an *Error of
// ClassDeclined carrying the charge's id.
func (c *Client) CreateCharge(ctx context.Context, key string, p ChargeParams) (Charge, Replayed, error) {
	var ch Charge
	replayed, err := c.do(ctx, http.MethodPost, "/v1/charges", key, p, &ch)
	return ch, replayed, err
}

// CreateRefund refunds with key.
func (c *Client) CreateRefund(ctx context.Context, key string, p RefundParams) (Refund, Replayed, error) {
	var rf Refund
	replayed, err := c.do(ctx, http.MethodPost, "/v1/refunds", key, p, &rf)
	return rf, replayed, err
}

// ChargeByKey looks up the charge created with key: found false when the
// provider has no record of the key (never seen, or expired); an *Error of
// ClassInProgress while a request with it is in flight.
func (c *Client) ChargeByKey(ctx context.Context, key string) (Charge, bool, error) {
	return byKey[Charge](ctx, c, "/v1/charges", key)
}

// RefundByKey is ChargeByKey for refunds.
func (c *Client) RefundByKey(ctx context.Context, key string) (Refund, bool, error) {
	return byKey[Refund](ctx, c, "/v1/refunds", key)
}

// byKey lists path by idempotency key and returns the first object.
func byKey[T any](ctx context.Context, c *Client, path, key string) (T, bool, error) {
	var list struct{ Data []T }
	var zero T
	if _, err := c.do(ctx, http.MethodGet, path+"?idempotency_key="+url.QueryEscape(key), "", nil, &list); err != nil {
		return zero, false, err
	}
	if len(list.Data) == 0 {
		return zero, false, nil
	}
	return list.Data[0], true, nil
}

// ChargesByReference lists the charges made with a reference (metadata),
// which the provider keeps beyond the key's retention.
func (c *Client) ChargesByReference(ctx context.Context, reference string) ([]Charge, error) {
	var list struct{ Data []Charge }
	if _, err := c.do(ctx, http.MethodGet, "/v1/charges?reference="+url.QueryEscape(reference), "", nil, &list); err != nil {
		return nil, err
	}
	return list.Data, nil
}

// do sends one request and classifies the result. Whether anything was
// written to the connection decides between not sent and unknown.
func (c *Client) do(ctx context.Context, method, path, key string, body, out any) (Replayed, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return false, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(raw)
	}
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaderField: func(string, []string) { wrote.Store(true) },
	})
	req, err := http.NewRequestWithContext(ctx, method, c.base.JoinPath(strings.Split(path, "?")[0]).String(), rd)
	if err != nil {
		return false, fmt.Errorf("build %s %s: %w", method, path, err)
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		req.URL.RawQuery = path[i+1:]
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if !wrote.Load() {
			return false, &Error{Class: ClassNotSent, Err: err}
		}
		return false, &Error{Class: ClassUnknown, Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		// A reset mid-response: the status line came, the rest did not.
		return false, &Error{Class: ClassUnknown, Status: resp.StatusCode, Err: err}
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			return false, &Error{Class: ClassUnknown, Status: resp.StatusCode, Message: "undecodable answer", Err: err}
		}
		return Replayed(resp.Header.Get("Idempotent-Replayed") == "true"), nil
	}
	var apiErr struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Charge  string `json:"charge"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &apiErr)
	e := &Error{Status: resp.StatusCode, Code: apiErr.Error.Code, Message: apiErr.Error.Message, Charge: apiErr.Error.Charge}
	switch {
	case resp.StatusCode == http.StatusPaymentRequired:
		e.Class = ClassDeclined
	case resp.StatusCode == http.StatusConflict:
		e.Class = ClassInProgress
	case resp.StatusCode == http.StatusTooManyRequests:
		e.Class = ClassRateLimited
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		}
	case resp.StatusCode == http.StatusUnprocessableEntity:
		e.Class = ClassKeyMismatch
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		e.Class = ClassUnauthorized
	case resp.StatusCode/100 == 4:
		e.Class = ClassInvalid
	default:
		// 5xx: the provider may have committed before it failed.
		e.Class = ClassUnknown
	}
	return Replayed(resp.Header.Get("Idempotent-Replayed") == "true"), e
}
