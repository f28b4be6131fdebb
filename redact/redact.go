package redact

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Mask replaces every sensitive value.
const Mask = "[redacted]"

// MinValueLen is the shortest sensitive value that Text looks for in free
// text. Shorter values ("42", "no") occur in ordinary words and numbers, and
// masking them would garble messages; their "field": value fragments are
// still masked.
const MinValueLen = 4

// Redactor masks the values of the sensitive fields it was built with.
type Redactor struct {
	rules []rule
	// fragments find "field": value and field=value in text, for every
	// rule's field name.
	fragments []*regexp.Regexp
	names     map[string]bool
}

type rule struct {
	scope string   // "" every event; "order.created", "order.*" or "*.created"
	path  []string // one name: the field at any depth; more: from the root
}

var (
	scopePattern = regexp.MustCompile(`^(\*|[A-Za-z0-9_.-]{1,100})\.(\*|[A-Za-z0-9_-]{1,100})$`)
	fieldPattern = regexp.MustCompile(`^[^.:,\s"\\=]{1,200}$`)
)

// New parses specs, each a comma-separated list of entries
//
//	[SCOPE:]FIELD
//
// FIELD is a JSON field name, masked at any depth ("email"), or a dotted
// path from the document's root ("customer.card.number"); arrays on the way
// are looked through. SCOPE limits the entry to events of one type, written
// like effect routes: "order.created", "order.*" (every event of aggregate
// type order) or "*.created". Without specs New returns nil, a Redactor
// that changes nothing. Errors quote the entry, which names a field, never a
// value.
func New(specs []string) (*Redactor, error) {
	r := &Redactor{names: map[string]bool{}}
	for _, spec := range specs {
		for _, entry := range strings.Split(spec, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			ru, err := parseRule(entry)
			if err != nil {
				return nil, err
			}
			r.rules = append(r.rules, ru)
			r.names[ru.path[len(ru.path)-1]] = true
		}
	}
	if len(r.rules) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(r.names))
	for n := range r.names {
		names = append(names, regexp.QuoteMeta(n))
	}
	// Longest first, so "email_2" is tried before "email".
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	alt := strings.Join(names, "|")
	r.fragments = []*regexp.Regexp{
		// "email": "a@b.c" (also numbers, literals, flat objects and arrays)
		regexp.MustCompile(`("(?:` + alt + `)"\s*:\s*)("(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null|\{[^{}]*\}|\[[^\[\]]*\])`),
		// the same inside a quoted string: {\"email\":\"a@b.c\"}
		regexp.MustCompile(`(\\"(?:` + alt + `)\\"\s*:\s*)(\\"(?:[^"\\]|\\[^"])*\\"|-?[0-9][0-9.eE+-]*|true|false|null)`),
		// email=a@b.c or email="a b"
		regexp.MustCompile(`(\b(?:` + alt + `)=)("(?:[^"\\]|\\.)*"|[^\s,;&)\]}]+)`),
	}
	return r, nil
}

func parseRule(entry string) (rule, error) {
	var ru rule
	field := entry
	if scope, f, ok := strings.Cut(entry, ":"); ok {
		if !scopePattern.MatchString(scope) {
			return ru, fmt.Errorf("sensitive field %q: scope %q: use <aggregate_type>.<event_type>, either part may be *", entry, scope)
		}
		ru.scope, field = scope, f
	}
	ru.path = strings.Split(field, ".")
	for _, seg := range ru.path {
		if !fieldPattern.MatchString(seg) {
			return ru, fmt.Errorf("sensitive field %q: use a field name or a dotted path such as customer.email, optionally after <aggregate_type>.<event_type>:", entry)
		}
	}
	return ru, nil
}

// Enabled reports whether any field is sensitive.
func (r *Redactor) Enabled() bool { return r != nil && len(r.rules) > 0 }

// Fields lists the specs in force, one entry each, for logs and --help.
func (r *Redactor) Fields() []string {
	if r == nil {
		return nil
	}
	out := make([]string, len(r.rules))
	for i, ru := range r.rules {
		out[i] = strings.Join(ru.path, ".")
		if ru.scope != "" {
			out[i] = ru.scope + ":" + out[i]
		}
	}
	return out
}

func (ru rule) applies(aggregateType, eventType string) bool {
	if ru.scope == "" {
		return true
	}
	if ru.scope == aggregateType+"."+eventType {
		return true
	}
	if agg, ok := strings.CutSuffix(ru.scope, ".*"); ok && (agg == "*" || agg == aggregateType) {
		return true
	}
	if ev, ok := strings.CutPrefix(ru.scope, "*."); ok && ev == eventType {
		return true
	}
	return false
}

func (ru rule) matches(path []string) bool {
	if len(ru.path) == 1 {
		return path[len(path)-1] == ru.path[0]
	}
	return slices.Equal(ru.path, path)
}

// rulesFor are the rules of one event type.
func (r *Redactor) rulesFor(aggregateType, eventType string) []rule {
	if r == nil {
		return nil
	}
	var out []rule
	for _, ru := range r.rules {
		if ru.applies(aggregateType, eventType) {
			out = append(out, ru)
		}
	}
	return out
}

// Payload returns payload with the value of every sensitive field of the
// event type replaced by Mask; other fields keep their values, and keys are
// sorted. A payload that is not JSON cannot be searched and is replaced by
// Mask as a whole when any rule applies. Without applicable rules payload
// comes back unchanged.
func (r *Redactor) Payload(aggregateType, eventType string, payload []byte) []byte {
	rules := r.rulesFor(aggregateType, eventType)
	if len(rules) == 0 {
		return payload
	}
	doc, err := decode(payload)
	if err != nil {
		out, _ := json.Marshal(Mask)
		return out
	}
	doc = walk(doc, nil, rules, nil)
	out, err := json.Marshal(doc)
	if err != nil { // cannot happen: doc came from JSON
		out, _ = json.Marshal(Mask)
	}
	return out
}

// Text returns text with the sensitive values of payload masked wherever
// they occur (values of at least MinValueLen characters, also in their JSON
// and Go-quoted forms), and with every "field": value or field=value
// fragment of a sensitive field masked. payload may be nil (fragments only)
// or not JSON (fragments only).
func (r *Redactor) Text(aggregateType, eventType string, payload []byte, text string) string {
	if !r.Enabled() || text == "" {
		return text
	}
	if rules := r.rulesFor(aggregateType, eventType); len(rules) > 0 && len(payload) > 0 {
		if doc, err := decode(payload); err == nil {
			var values []string
			walk(doc, nil, rules, func(leaf any) { values = append(values, forms(leaf)...) })
			// Longest first: a value that contains another is masked whole.
			slices.SortFunc(values, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
			for _, v := range slices.Compact(values) {
				if len([]rune(v)) >= MinValueLen {
					text = strings.ReplaceAll(text, v, Mask)
				}
			}
		}
	}
	return r.scrub(text)
}

// scrub masks the fragments of sensitive fields in text.
func (r *Redactor) scrub(text string) string {
	if !r.Enabled() {
		return text
	}
	for i, re := range r.fragments {
		repl := `${1}"` + Mask + `"`
		switch i {
		case 1:
			repl = `${1}\"` + Mask + `\"`
		case 2:
			repl = `${1}` + Mask
		}
		text = re.ReplaceAllString(text, repl)
	}
	return text
}

func decode(payload []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber() // numbers keep their exact text
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// walk replaces the sensitive values under v (at path) with Mask. leaf, when
// not nil, receives every scalar inside a replaced value first.
func walk(v any, path []string, rules []rule, leaf func(any)) any {
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			p := append(slices.Clip(path), k)
			if slices.ContainsFunc(rules, func(ru rule) bool { return ru.matches(p) }) {
				if leaf != nil {
					leaves(child, leaf)
				}
				x[k] = Mask
				continue
			}
			x[k] = walk(child, p, rules, leaf)
		}
	case []any:
		for i, child := range x {
			x[i] = walk(child, path, rules, leaf)
		}
	}
	return v
}

func leaves(v any, f func(any)) {
	switch x := v.(type) {
	case map[string]any:
		for _, child := range x {
			leaves(child, f)
		}
	case []any:
		for _, child := range x {
			leaves(child, f)
		}
	default:
		f(x)
	}
}

// forms are the ways a scalar can appear in text: as is, JSON-escaped and
// Go-quoted (%q).
func forms(v any) []string {
	switch x := v.(type) {
	case string:
		out := []string{x}
		if j, err := json.Marshal(x); err == nil {
			out = append(out, string(j[1:len(j)-1]))
		}
		q := strconv.Quote(x)
		return append(out, q[1:len(q)-1])
	case json.Number:
		return []string{x.String()}
	}
	return nil // booleans and null say too little to find in text
}
