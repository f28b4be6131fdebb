package outbox

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// The rules for Event.Headers. The schema checks the same ones on every
// insert, from Go or plain SQL (migration 0008, constraint
// outbox_events_headers_valid); a test holds the two to agreement.
const (
	// MaxHeaders is the most headers one event carries.
	MaxHeaders = 32
	// MaxHeadersBytes bounds the bytes of all header names and values
	// together (UTF-8, not counting any JSON escaping).
	MaxHeadersBytes = 8192
	// HeaderNamePattern is what a header name matches: 1-64 letters,
	// digits, '_', '.' or '-', starting with a letter or digit.
	HeaderNamePattern = `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`
)

// ReservedHeaderPrefixes and ReservedHeaderNames are the header names a
// producer may not set, compared case-insensitively: "ferry-" is Ferry's
// message contract (broker.Header*, and the headers the consumer adds when
// it retries or parks a message), "x-" is RabbitMQ's (x-death,
// x-delivery-count, …), message_id and message-id name the event id, and
// traceparent and tracestate are the trace context the relay sets.
var (
	ReservedHeaderPrefixes = []string{"ferry-", "x-"}
	ReservedHeaderNames    = []string{"message_id", "message-id", "traceparent", "tracestate"}
)

var headerName = regexp.MustCompile(HeaderNamePattern)

// CheckHeaderName reports why name cannot be an event header, or nil.
func CheckHeaderName(name string) error {
	if !headerName.MatchString(name) {
		return fmt.Errorf("header name %q is not allowed: use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit", name)
	}
	if ReservedHeader(name) {
		return fmt.Errorf("header %q is reserved (Ferry and RabbitMQ set ferry-*, x-*, message_id, message-id, traceparent and tracestate)", name)
	}
	return nil
}

// ReservedHeader says whether name is one Ferry or RabbitMQ sets on a
// message (ReservedHeaderPrefixes, ReservedHeaderNames), in any case.
func ReservedHeader(name string) bool {
	lower := strings.ToLower(name)
	for _, p := range ReservedHeaderPrefixes {
		if strings.HasPrefix(lower, p) {
			return true
		}
	}
	return slices.Contains(ReservedHeaderNames, lower)
}

// ValidateHeaders checks headers the way Validate does, naming the first
// header that breaks a rule. Headers are checked in the order jsonb keeps
// keys (shorter names first, then bytewise), which is the schema's order,
// so both name the same header. It is pure.
func ValidateHeaders(headers map[string]string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: Headers: %s", ErrInvalidEvent, fmt.Sprintf(format, args...))
	}
	total := 0
	for i, name := range headerOrder(headers) {
		if i == MaxHeaders {
			return bad("%d headers, over the limit of %d (outbox.MaxHeaders)", len(headers), MaxHeaders)
		}
		if err := CheckHeaderName(name); err != nil {
			return bad("%v", err)
		}
		v := headers[name]
		switch {
		case !utf8.ValidString(v):
			return bad("header %q is not valid UTF-8", name)
		case strings.IndexByte(v, 0) >= 0:
			return bad("header %q contains a NUL byte, which PostgreSQL's jsonb cannot store", name)
		}
		total += len(name) + len(v)
	}
	if total > MaxHeadersBytes {
		return bad("header names and values are %d bytes, over the limit of %d (outbox.MaxHeadersBytes)", total, MaxHeadersBytes)
	}
	return nil
}

// headerOrder is the names of headers in jsonb's key order.
func headerOrder(headers map[string]string) []string {
	names := make([]string, 0, len(headers))
	for k := range headers {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
	})
	return names
}

// headersJSON is the column value of headers: NULL for none.
func headersJSON(headers map[string]string) (*string, error) {
	if len(headers) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(headers)
	if err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	s := string(b)
	return &s, nil
}
