package redact_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/redact"
)

func TestNewRejectsBadSpecs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec string
		want string
	}{
		{"order:email", "scope \"order\""},
		{"order.*.x:email", "scope"},
		{"a b", "use a field name"},
		{"customer..email", "use a field name"},
		{"order.created:", "use a field name"},
		{`em"ail`, "use a field name"},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			t.Parallel()
			_, err := redact.New([]string{tc.spec})
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "sensitive field")
		})
	}
}

func TestNoSpecsIsOff(t *testing.T) {
	t.Parallel()
	r, err := redact.New([]string{"", " , "})
	require.NoError(t, err)
	require.Nil(t, r)
	require.False(t, r.Enabled())
	p := []byte(`{"email":"a@b.c"}`)
	require.Equal(t, p, r.Payload("order", "created", p))
	require.Equal(t, `bad "email":"a@b.c"`, r.Text("order", "created", p, `bad "email":"a@b.c"`))
	h := slog.NewTextHandler(&bytes.Buffer{}, nil)
	require.Same(t, h, r.Handler(h))
}

func TestPayload(t *testing.T) {
	t.Parallel()
	doc := `{"id":"o-1","email":"ann@example.com","amount":1200,
		"customer":{"name":"Ann Lee","email":"ann@work.example","card":{"number":"4242424242424242","brand":"visa"}},
		"lines":[{"sku":"A-1","note":"gift for Bob"},{"sku":"B-2","note":"leave at door"}]}`
	cases := []struct {
		name      string
		specs     []string
		aggType   string
		eventType string
		want      string
	}{
		{
			name:  "a name matches at any depth",
			specs: []string{"email"},
			want: `{"amount":1200,"customer":{"card":{"brand":"visa","number":"4242424242424242"},"email":"[redacted]","name":"Ann Lee"},` +
				`"email":"[redacted]","id":"o-1","lines":[{"note":"gift for Bob","sku":"A-1"},{"note":"leave at door","sku":"B-2"}]}`,
		},
		{
			name:  "a path matches from the root only",
			specs: []string{"customer.email"},
			want: `{"amount":1200,"customer":{"card":{"brand":"visa","number":"4242424242424242"},"email":"[redacted]","name":"Ann Lee"},` +
				`"email":"ann@example.com","id":"o-1","lines":[{"note":"gift for Bob","sku":"A-1"},{"note":"leave at door","sku":"B-2"}]}`,
		},
		{
			name:  "an object is masked whole; arrays are looked through; numbers too",
			specs: []string{"customer.card, lines.note", "amount"},
			want: `{"amount":"[redacted]","customer":{"card":"[redacted]","email":"ann@work.example","name":"Ann Lee"},` +
				`"email":"ann@example.com","id":"o-1","lines":[{"note":"[redacted]","sku":"A-1"},{"note":"[redacted]","sku":"B-2"}]}`,
		},
		{
			name: "a scope of another event type does not apply", specs: []string{"order.paid:email"},
			aggType: "order", eventType: "created", want: doc,
		},
		{
			name: "exact scope", specs: []string{"order.created:customer.name"}, aggType: "order", eventType: "created",
			want: `{"amount":1200,"customer":{"card":{"brand":"visa","number":"4242424242424242"},"email":"ann@work.example","name":"[redacted]"},` +
				`"email":"ann@example.com","id":"o-1","lines":[{"note":"gift for Bob","sku":"A-1"},{"note":"leave at door","sku":"B-2"}]}`,
		},
		{
			name: "aggregate wildcard", specs: []string{"*.created:id"}, aggType: "invoice", eventType: "created",
			want: `{"amount":1200,"customer":{"card":{"brand":"visa","number":"4242424242424242"},"email":"ann@work.example","name":"Ann Lee"},` +
				`"email":"ann@example.com","id":"[redacted]","lines":[{"note":"gift for Bob","sku":"A-1"},{"note":"leave at door","sku":"B-2"}]}`,
		},
		{
			name: "event wildcard of a dotted aggregate type", specs: []string{"shop.order.*:id"}, aggType: "shop.order", eventType: "paid",
			want: `{"amount":1200,"customer":{"card":{"brand":"visa","number":"4242424242424242"},"email":"ann@work.example","name":"Ann Lee"},` +
				`"email":"ann@example.com","id":"[redacted]","lines":[{"note":"gift for Bob","sku":"A-1"},{"note":"leave at door","sku":"B-2"}]}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := redact.New(tc.specs)
			require.NoError(t, err)
			got := r.Payload(tc.aggType, tc.eventType, []byte(doc))
			require.JSONEq(t, tc.want, string(got))
		})
	}
}

func TestPayloadThatIsNotJSONIsMaskedWhole(t *testing.T) {
	t.Parallel()
	r, err := redact.New([]string{"email"})
	require.NoError(t, err)
	require.Equal(t, `"[redacted]"`, string(r.Payload("order", "created", []byte(`{"email":"ann@`))))
}

func TestText(t *testing.T) {
	t.Parallel()
	payload := []byte(`{"email":"ann@example.com","name":"Ann \"Nan\" Lee","pin":"12","iban":"DE89 3704 0044 0532 0130 00","amount":4711,"ok":true}`)
	r, err := redact.New([]string{"email,name,pin,iban,amount,ok"})
	require.NoError(t, err)
	cases := []struct {
		name, text, want string
	}{
		{"a handler's error quoting a value", `mailbox ann@example.com does not exist`, `mailbox [redacted] does not exist`},
		{"Go-quoted with escapes", `customer "Ann \"Nan\" Lee" is blocked`, `customer "[redacted]" is blocked`},
		{"JSON-escaped", `{"customer":"Ann \"Nan\" Lee"}`, `{"customer":"[redacted]"}`},
		{"a number", `amount 4711 over the limit`, `amount [redacted] over the limit`},
		{"a short value stays in free text", `pin 12 of 12 tries`, `pin 12 of 12 tries`},
		{"but not in a fragment", `bad payload {"pin":"12","sku":"A-1"}`, `bad payload {"pin":"[redacted]","sku":"A-1"}`},
		{"a fragment of a value not in the payload", `was {"email": "old@example.com", "ok": false}`, `was {"email": "[redacted]", "ok": "[redacted]"}`},
		{"a fragment inside a quoted document", `body "{\"email\":\"x@y.z\",\"sku\":\"A\"}"`, `body "{\"email\":\"[redacted]\",\"sku\":\"A\"}"`},
		{"logfmt", `rejected email=x@y.z sku=A`, `rejected email=[redacted] sku=A`},
		{"a value with spaces", `iban DE89 3704 0044 0532 0130 00 invalid`, `iban [redacted] invalid`},
		{"other text untouched", `unroutable: no queue bound to order.created`, `unroutable: no queue bound to order.created`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, r.Text("order", "created", payload, tc.text))
		})
	}
}

func TestTextOfAnotherEventTypeMasksFragmentsOnly(t *testing.T) {
	t.Parallel()
	r, err := redact.New([]string{"order.created:email"})
	require.NoError(t, err)
	payload := []byte(`{"email":"ann@example.com"}`)
	require.Equal(t, `to ann@example.com`, r.Text("order", "paid", payload, `to ann@example.com`))
	require.Equal(t, `to [redacted]`, r.Text("order", "created", payload, `to ann@example.com`))
	require.Equal(t, `{"email":"[redacted]"}`, r.Text("order", "paid", nil, `{"email":"ann@example.com"}`))
}

func TestHandler(t *testing.T) {
	t.Parallel()
	r, err := redact.New([]string{"customer.email", "card"})
	require.NoError(t, err)
	var buf bytes.Buffer
	log := slog.New(r.Handler(slog.NewJSONHandler(&buf, nil))).With("email", "ann@example.com")
	log.WithGroup("g").Info(`parked {"email":"bob@example.com"}`,
		"reason", `handler failed: card=4242424242424242`,
		"error", fmt.Errorf("wrapped: %w", errors.New(`{"card":{"n":"4242"}}`)),
		"payload", json.RawMessage(`{"customer":{"email":"c@example.com","name":"C"}}`),
		"body", []byte(`{"email":"d@example.com"}`),
		"nested", slog.GroupValue(slog.String("card", "4242"), slog.Int("n", 3)),
		"plain", 42,
	)
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	require.Equal(t, `parked {"email":"[redacted]"}`, line["msg"])
	require.Equal(t, "[redacted]", line["email"])
	g := line["g"].(map[string]any)
	require.Equal(t, `handler failed: card=[redacted]`, g["reason"])
	require.Equal(t, `wrapped: {"card":"[redacted]"}`, g["error"])
	require.Equal(t, `{"customer":{"email":"[redacted]","name":"C"}}`, g["payload"])
	require.Equal(t, `{"email":"[redacted]"}`, g["body"])
	require.Equal(t, map[string]any{"card": "[redacted]", "n": 3.0}, g["nested"])
	require.Equal(t, 42.0, g["plain"])
	require.NotContains(t, buf.String(), "example.com")
	require.NotContains(t, buf.String(), "4242")
}

func TestFields(t *testing.T) {
	t.Parallel()
	r, err := redact.New([]string{" email , order.created:customer.card "})
	require.NoError(t, err)
	require.Equal(t, []string{"email", "order.created:customer.card"}, r.Fields())
}
