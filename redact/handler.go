package redact

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
)

// Handler wraps h so that every record it writes has sensitive values
// masked: an attribute whose key is a sensitive field's name (the last part
// of its path, whatever the scope), and every "field": value or field=value
// fragment in the message or in any attribute's text. A JSON document held
// in a []byte or json.RawMessage attribute is masked field by field. A log
// line knows no payload, so a value quoted without its field name passes;
// callers that have the payload mask such text with Text first. Without
// rules Handler returns h.
func (r *Redactor) Handler(h slog.Handler) slog.Handler {
	if !r.Enabled() {
		return h
	}
	return &handler{next: h, r: r}
}

type handler struct {
	next slog.Handler
	r    *Redactor
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.scrub(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	masked := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		masked[i] = h.attr(a)
	}
	return &handler{next: h.next.WithAttrs(masked), r: h.r}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name), r: h.r}
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	if h.r.names[a.Key] {
		return slog.String(a.Key, Mask)
	}
	switch v.Kind() {
	case slog.KindGroup:
		group := v.Group()
		masked := make([]any, len(group))
		for i, g := range group {
			masked[i] = h.attr(g)
		}
		return slog.Group(a.Key, masked...)
	case slog.KindString:
		return slog.String(a.Key, h.r.scrub(v.String()))
	case slog.KindAny:
		var text string
		switch x := v.Any().(type) {
		case json.RawMessage:
			return slog.String(a.Key, h.r.scrub(string(h.r.allFields(x))))
		case []byte:
			if json.Valid(x) {
				return slog.String(a.Key, h.r.scrub(string(h.r.allFields(x))))
			}
			text = string(x)
		case error:
			text = x.Error()
		default:
			text = fmt.Sprintf("%+v", x)
		}
		// Only a changed text replaces the value, so that handlers keep
		// printing other values their own way.
		if s := h.r.scrub(text); s != text {
			return slog.String(a.Key, s)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// allFields masks a document with every rule, whatever its scope: a log
// line does not say which event type a document belongs to.
func (r *Redactor) allFields(doc []byte) []byte {
	doc2, err := decode(doc)
	if err != nil {
		return doc
	}
	out, err := json.Marshal(walk(doc2, nil, r.rules, nil))
	if err != nil {
		return doc
	}
	return out
}
