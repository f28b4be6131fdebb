package destination

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ErrPermanent marks a delivery that cannot succeed however often it is
// tried: the event does not fit the route (a payload field the workflow ID
// template names is missing, or the ID it yields is one Temporal refuses).
// Ferry quarantines such an event at once, with the error as its reason.
var ErrPermanent = errors.New("event cannot be delivered to this destination")

// template is a compiled workflow ID template: literal text and
// placeholders, each one part.
type template struct {
	text  string
	parts []part
}

type part struct {
	literal string
	// field is the placeholder's name ("event_id"…) or, for the payload,
	// its path (["customer", "id"] for {payload.customer.id}).
	field string
	path  []string
}

// placeholders are the fields of the event a template can name besides the
// payload's.
var placeholders = map[string]func(Envelope) string{
	"aggregate_type":    func(e Envelope) string { return e.AggregateType },
	"aggregate_id":      func(e Envelope) string { return e.AggregateID },
	"aggregate_version": func(e Envelope) string { return strconv.FormatInt(e.AggregateVersion, 10) },
	"event_id":          func(e Envelope) string { return e.EventID },
	"event_type":        func(e Envelope) string { return e.EventType },
}

var payloadPath = regexp.MustCompile(`^payload(\.[A-Za-z_][A-Za-z0-9_-]{0,63}){1,8}$`)

// maxIDBytes is the longest workflow ID a template may yield: Temporal's
// default limit.maxIDLength.
const maxIDBytes = 1000

// compileTemplate parses text: literal printable ASCII (no braces) and
// placeholders {aggregate_type}, {aggregate_id}, {aggregate_version},
// {event_id}, {event_type} and {payload.<field>[.<field>…]}.
func compileTemplate(text string) (template, error) {
	t := template{text: text}
	rest := text
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			t.parts = append(t.parts, part{literal: rest})
			break
		}
		if rest[open] == '}' {
			return t, fmt.Errorf("template %q: '}' without '{'", text)
		}
		if open > 0 {
			t.parts = append(t.parts, part{literal: rest[:open]})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return t, fmt.Errorf("template %q: '{' without '}'", text)
		}
		name := rest[open+1 : open+end]
		switch {
		case placeholders[name] != nil:
			t.parts = append(t.parts, part{field: name})
		case payloadPath.MatchString(name):
			t.parts = append(t.parts, part{field: name, path: strings.Split(name, ".")[1:]})
		default:
			return t, fmt.Errorf("template %q: unknown placeholder {%s} (known: {aggregate_type}, {aggregate_id}, {aggregate_version}, {event_id}, {event_type}, {payload.<field>})", text, name)
		}
		rest = rest[open+end+1:]
	}
	for _, p := range t.parts {
		if p.field == "" && !printable(p.literal) {
			return t, fmt.Errorf("template %q: only printable ASCII outside placeholders (Temporal sends workflow IDs in a gRPC header)", text)
		}
	}
	if len(t.parts) == 0 {
		return t, errors.New("template is empty")
	}
	return t, nil
}

// render fills the template from ev. A payload field that is missing, or
// not a string, number or boolean, and an ID Temporal would refuse, are
// ErrPermanent: the same event fails the same way every time.
func (t template) render(ev Envelope) (string, error) {
	var b strings.Builder
	var doc map[string]json.RawMessage
	for _, p := range t.parts {
		switch {
		case p.field == "":
			b.WriteString(p.literal)
		case p.path == nil:
			b.WriteString(placeholders[p.field](ev))
		default:
			if doc == nil {
				if err := json.Unmarshal(ev.Payload, &doc); err != nil || doc == nil {
					return "", fmt.Errorf("%w: workflow ID template %q names {%s}, but the payload is not a JSON object", ErrPermanent, t.text, p.field)
				}
			}
			v, err := lookup(doc, p.path)
			if err != nil {
				return "", fmt.Errorf("%w: workflow ID template %q: {%s}: %v", ErrPermanent, t.text, p.field, err)
			}
			b.WriteString(v)
		}
	}
	id := b.String()
	switch {
	case id == "":
		return "", fmt.Errorf("%w: workflow ID template %q yields an empty ID", ErrPermanent, t.text)
	case len(id) > maxIDBytes:
		return "", fmt.Errorf("%w: workflow ID template %q yields %d bytes, more than Temporal's %d", ErrPermanent, t.text, len(id), maxIDBytes)
	case !printable(id):
		return "", fmt.Errorf("%w: workflow ID template %q yields %q, which has bytes outside printable ASCII (0x20-0x7E) that Temporal refuses in a workflow ID", ErrPermanent, t.text, id)
	}
	return id, nil
}

// lookup walks path through nested objects to a scalar.
func lookup(doc map[string]json.RawMessage, path []string) (string, error) {
	raw, ok := doc[path[0]]
	if !ok {
		return "", fmt.Errorf("the payload has no field %q", path[0])
	}
	if len(path) > 1 {
		var inner map[string]json.RawMessage
		if err := json.Unmarshal(raw, &inner); err != nil || inner == nil {
			return "", fmt.Errorf("field %q is not an object", path[0])
		}
		v, err := lookup(inner, path[1:])
		if err != nil {
			return "", fmt.Errorf("in %q: %w", path[0], err)
		}
		return v, nil
	}
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("field %q: %v", path[0], err)
		}
		if s == "" {
			return "", fmt.Errorf("field %q is an empty string", path[0])
		}
		return s, nil
	case string(raw) == "true" || string(raw) == "false":
		return string(raw), nil
	case len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
		return string(raw), nil
	default:
		return "", fmt.Errorf("field %q is %s, not a string, number or boolean", path[0], kind(raw))
	}
}

func kind(raw json.RawMessage) string {
	switch {
	case string(raw) == "null":
		return "null"
	case len(raw) > 0 && raw[0] == '{':
		return "an object"
	case len(raw) > 0 && raw[0] == '[':
		return "an array"
	}
	return "not a scalar"
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
