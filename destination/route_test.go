package destination

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseAndRouteDefaults(t *testing.T) {
	t.Parallel()
	dests, err := ParseAll([]string{
		"order.created=start:fulfilment,type=Fulfilment,queue=orders;order.paid=signal:fulfilment,id=fulfilment-{aggregate_id}",
		"order.noted=signal-with-start:audit,type=Audit,queue=audit,id=audit-{payload.customer.id},signal=note,broker=false",
	})
	require.NoError(t, err)
	r, err := NewRouter(dests)
	require.NoError(t, err)
	require.Equal(t, 3, r.Len())
	require.Equal(t, []string{"order.created", "order.noted", "order.paid"}, r.Events())

	created, skip := r.For("order", "created")
	require.False(t, skip)
	require.Len(t, created, 1)
	require.Equal(t, "fulfilment/{event_id}", created[0].WorkflowID, "a start defaults to one workflow per event")

	paid, _ := r.For("order", "paid")
	require.Equal(t, "paid", paid[0].Signal, "a signal defaults to the event type")

	noted, skip := r.For("order", "noted")
	require.True(t, skip)
	id, err := noted[0].RenderID(Envelope{Payload: json.RawMessage(`{"customer":{"id":42}}`)})
	require.NoError(t, err)
	require.Equal(t, "audit-42", id)
	require.Equal(t, "order.noted=signal-with-start:audit,type=Audit,queue=audit,id=audit-{payload.customer.id},signal=note,broker=false", noted[0].String())

	none, skip := r.For("order", "shipped")
	require.Nil(t, none)
	require.False(t, skip)
	var nilRouter *Router
	none, _ = nilRouter.For("order", "created")
	require.Nil(t, none)
	require.Zero(t, nilRouter.Len())
}

func TestRouteErrorsNameTheProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ spec, want string }{
		{"order.created", "use <aggregate_type>.<event_type>=<action>:<name>"},
		{"order.created=start", "use <action>:<name>"},
		{"order.created=launch:x,type=T,queue=q", `unknown action "launch"`},
		{"order.created=start:Fulfil,type=T,queue=q", `name "Fulfil"`},
		{"order.created=start:f,queue=q", "start needs type=<workflow type>"},
		{"order.created=start:f,type=T", "start needs queue=<task queue>"},
		{"order.created=signal:f", "signal needs id=<workflow ID template>"},
		{"order.created=signal:f,id=x,type=T", "type= and queue= do not apply"},
		{"order.created=start:f,type=T,queue=q,signal=s", "signal= does not apply"},
		{"order.created=start:f,type=T,queue=q,color=red", `unknown option "color"`},
		{"order.created=start:f,type=T,queue=q,type=U", `option "type" twice`},
		{"order.created=start:f,type=T,queue=q,broker=maybe", "use broker=false"},
		{"order.created=start:f,type=T,queue=q,id={order_id}", "unknown placeholder {order_id}"},
		{"order.created=start:f,type=T,queue=q,id=a{event_id", "'{' without '}'"},
		{"order.created=start:f,type=T,queue=q,id=a}b", "'}' without '{'"},
		{"order.created=start:f,type=T,queue=q,id=é-{event_id}", "only printable ASCII"},
		{"ordercreated=start:f,type=T,queue=q", `event "ordercreated"`},
		{"order.created=start:f,type= T,queue=q", `type=" T"`},
		{"a.b.c=signal:f,id=x", "name the signal"},
	} {
		dests, err := ParseAll([]string{tc.spec})
		if err == nil {
			_, err = NewRouter(dests)
		}
		require.ErrorContains(t, err, tc.want, tc.spec)
	}
}

func TestRouterRefusesConflicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		specs []string
		want  string
	}{
		{[]string{"order.created=start:f,type=T,queue=q", "order.created=signal:f,id=x"}, `has a destination named "f" already`},
		{[]string{"order.created=start:f,type=T,queue=q,broker=false", "order.created=signal:g,id=x"}, "give every destination of an event type the same"},
	} {
		dests, err := ParseAll(tc.specs)
		require.NoError(t, err)
		_, err = NewRouter(dests)
		require.ErrorContains(t, err, tc.want)
	}
	// The same name on different event types is one destination fed by both.
	dests, err := ParseAll([]string{"order.created=start:f,type=T,queue=q", "order.paid=signal:f,id=x"})
	require.NoError(t, err)
	_, err = NewRouter(dests)
	require.NoError(t, err)
}

func TestTemplateRendersAndRefuses(t *testing.T) {
	t.Parallel()
	ev := Envelope{EventID: "0190", EventType: "paid", AggregateType: "order", AggregateID: "o 17", AggregateVersion: 3,
		Payload: json.RawMessage(`{"s":"x","n":-1.5,"b":true,"z":null,"o":{},"a":[],"e":"","u":"ü"}`)}
	ok := map[string]string{
		"{aggregate_type}/{aggregate_id}/{aggregate_version}": "order/o 17/3",
		"{event_type}-{event_id}":                             "paid-0190",
		"p-{payload.s}-{payload.n}-{payload.b}":               "p-x--1.5-true",
	}
	for text, want := range ok {
		tpl, err := compileTemplate(text)
		require.NoError(t, err)
		got, err := tpl.render(ev)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	bad := map[string]string{
		"{payload.missing}": `no field "missing"`,
		"{payload.z}":       "is null",
		"{payload.o}":       "is an object",
		"{payload.a}":       "is an array",
		"{payload.e}":       "empty string",
		"{payload.s.deep}":  `field "s" is not an object`,
		"{payload.u}":       "outside printable ASCII",
	}
	for text, want := range bad {
		tpl, err := compileTemplate(text)
		require.NoError(t, err)
		_, err = tpl.render(ev)
		require.ErrorIs(t, err, ErrPermanent, text)
		require.ErrorContains(t, err, want, text)
	}
	// {aggregate_id} is the id as written: one outside ASCII (schema 0012)
	// yields an ID Temporal refuses, and no escape could tell it apart
	// from an ASCII id in a template of the user's.
	tpl, err := compileTemplate("fulfil-{aggregate_id}")
	require.NoError(t, err)
	_, err = tpl.render(Envelope{AggregateType: "order", AggregateID: "müller"})
	require.ErrorIs(t, err, ErrPermanent)
	require.ErrorContains(t, err, `yields "fulfil-müller", which has bytes outside printable ASCII`)
	tpl, err = compileTemplate("{payload.s}")
	require.NoError(t, err)
	_, err = tpl.render(Envelope{Payload: json.RawMessage(`[1]`)})
	require.True(t, errors.Is(err, ErrPermanent))
	require.ErrorContains(t, err, "not a JSON object")
}

func TestDedupDropsRepeatsPerAggregate(t *testing.T) {
	t.Parallel()
	var d Dedup
	ev := func(agg string, v int64) Envelope {
		return Envelope{AggregateType: "order", AggregateID: agg, AggregateVersion: v}
	}
	require.True(t, d.First(ev("a", 1)))
	require.False(t, d.First(ev("a", 1)), "the same version again is a repeat")
	require.True(t, d.First(ev("b", 1)), "another aggregate has its own versions")
	require.True(t, d.First(ev("a", 3)), "a version skipped upstream is no repeat")
	require.False(t, d.First(ev("a", 2)), "an older version after a newer one is a repeat")
	require.True(t, d.Seen(ev("a", 3)))
	require.False(t, d.Seen(ev("a", 4)))

	// It survives continue-as-new as JSON.
	raw, err := json.Marshal(d)
	require.NoError(t, err)
	var again Dedup
	require.NoError(t, json.Unmarshal(raw, &again))
	require.False(t, again.First(ev("a", 3)))
	require.True(t, again.First(ev("a", 4)))
}

func TestRequestIDIsStablePerEventAndDestination(t *testing.T) {
	t.Parallel()
	a := RequestID("0190e0e0-0000-7000-8000-000000000001", "fulfilment")
	require.Equal(t, a, RequestID("0190e0e0-0000-7000-8000-000000000001", "fulfilment"))
	require.NotEqual(t, a, RequestID("0190e0e0-0000-7000-8000-000000000001", "audit"))
	require.NotEqual(t, a, RequestID("0190e0e0-0000-7000-8000-000000000002", "fulfilment"))
}
