package effects

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/ferry-outbox/ferry/workflows"
)

// Kind is a kind of effect: the workflow that performs it.
type Kind struct {
	// WorkflowType is the registered name of the effect workflow, which
	// takes a workflows.EffectInput. Required.
	WorkflowType string
	// TaskQueue of the effect workflow. Default: the aggregate's.
	TaskQueue string
	// Params are passed to every effect of the kind (EffectInput.Params),
	// encoded as JSON. Default: none.
	Params any
	// NeedsArgument: the effect is named "<kind>:<argument>" (the e-mail
	// template, for instance). Default false: the bare kind name.
	NeedsArgument bool
}

// RouterConfig configures a Router.
type RouterConfig struct {
	// Routes maps "<aggregate_type>.<event_type>" (the default routing key
	// of the event) to the effects it triggers, named "<kind>" or
	// "<kind>:<argument>", e.g. "order.created": {"charge",
	// "email:confirmation"}. Default: none (every event is only published).
	Routes map[string][]string
	// Kinds adds effect kinds (or replaces built-in ones) by name.
	// Built in: "charge" and "refund" (the Payment workflow), "email"
	// (the Email workflow, with the template as argument).
	Kinds map[string]Kind
	// Payment tunes the built-in payment kinds. Default: PaymentParams'
	// defaults.
	Payment PaymentParams
}

// Router resolves the effects of a published event. Safe for concurrent
// use; immutable after NewRouter.
type Router struct {
	routes map[string][]workflows.EffectStart
}

var (
	effectName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,39}(:[a-z0-9][a-z0-9_.-]{0,59})?$`)
	routeKey   = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,255}$`)
)

// BuiltinKinds returns the built-in kinds with the given payment params.
func BuiltinKinds(p PaymentParams) map[string]Kind {
	return map[string]Kind{
		KindCharge: {WorkflowType: PaymentWorkflowName, Params: p},
		KindRefund: {WorkflowType: PaymentWorkflowName, Params: p},
		KindEmail:  {WorkflowType: EmailWorkflowName, NeedsArgument: true},
	}
}

// NewRouter validates cfg: every route names a known kind, with an
// argument where the kind needs one, and no effect twice per event.
func NewRouter(cfg RouterConfig) (*Router, error) {
	pp, err := cfg.Payment.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("effects: RouterConfig.Payment: %w", err)
	}
	kinds := BuiltinKinds(pp)
	maps.Copy(kinds, cfg.Kinds)
	r := &Router{routes: map[string][]workflows.EffectStart{}}
	for _, event := range slices.Sorted(maps.Keys(cfg.Routes)) {
		if !routeKey.MatchString(event) {
			return nil, fmt.Errorf("effects: RouterConfig.Routes: event %q: use <aggregate_type>.<event_type>", event)
		}
		seen := map[string]bool{}
		for _, name := range cfg.Routes[event] {
			start, err := resolve(kinds, name)
			if err != nil {
				return nil, fmt.Errorf("effects: RouterConfig.Routes[%q]: %w", event, err)
			}
			if seen[name] {
				return nil, fmt.Errorf("effects: RouterConfig.Routes[%q]: effect %q twice", event, name)
			}
			seen[name] = true
			r.routes[event] = append(r.routes[event], start)
		}
	}
	return r, nil
}

func resolve(kinds map[string]Kind, name string) (workflows.EffectStart, error) {
	if !effectName.MatchString(name) {
		return workflows.EffectStart{}, fmt.Errorf("effect %q: use <kind> or <kind>:<argument> in lower case, e.g. charge or email:confirmation", name)
	}
	kindName, arg, hasArg := strings.Cut(name, ":")
	k, ok := kinds[kindName]
	if !ok {
		return workflows.EffectStart{}, fmt.Errorf("effect %q: unknown kind %q (known: %s)", name, kindName, strings.Join(slices.Sorted(maps.Keys(kinds)), ", "))
	}
	if k.WorkflowType == "" {
		return workflows.EffectStart{}, fmt.Errorf("effect kind %q: WorkflowType is empty", kindName)
	}
	if k.NeedsArgument && (!hasArg || arg == "") {
		return workflows.EffectStart{}, fmt.Errorf("effect %q: kind %q needs an argument, e.g. %s:confirmation", name, kindName, kindName)
	}
	start := workflows.EffectStart{Effect: name, WorkflowType: k.WorkflowType, TaskQueue: k.TaskQueue}
	if k.Params != nil {
		raw, err := json.Marshal(k.Params)
		if err != nil {
			return workflows.EffectStart{}, fmt.Errorf("effect kind %q: params: %w", kindName, err)
		}
		start.Params = raw
	}
	return start, nil
}

// For returns the effects to start for a published event of the type
// (nil for none). Its signature fits activities.Config.Effects.
func (r *Router) For(aggregateType, eventType string) []workflows.EffectStart {
	if r == nil {
		return nil
	}
	return slices.Clone(r.routes[aggregateType+"."+eventType])
}

// Kinds returns the kinds the routes use, sorted: the app checks that the
// clients they need are configured.
func (r *Router) Kinds() []string {
	set := map[string]bool{}
	for _, starts := range r.routes {
		for _, s := range starts {
			k, _, _ := strings.Cut(s.Effect, ":")
			set[k] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// ParseRoute reads one --effect value, "<aggregate_type>.<event_type>=
// <effect>[,<effect>…]", e.g. "order.created=charge,email:confirmation".
func ParseRoute(s string) (event string, effects []string, err error) {
	event, list, ok := strings.Cut(s, "=")
	event = strings.TrimSpace(event)
	if !ok || event == "" || strings.TrimSpace(list) == "" {
		return "", nil, fmt.Errorf("effect route %q: use <aggregate_type>.<event_type>=<effect>[,<effect>…], e.g. order.created=charge,email:confirmation", s)
	}
	for _, e := range strings.Split(list, ",") {
		if e = strings.TrimSpace(e); e != "" {
			effects = append(effects, e)
		}
	}
	if len(effects) == 0 {
		return "", nil, fmt.Errorf("effect route %q names no effect", s)
	}
	return event, effects, nil
}

// ParseRoutes reads --effect values into RouterConfig.Routes. A value may
// hold several routes separated by ';' (the config file's one value); the
// same event given twice adds to its effects.
func ParseRoutes(values []string) (map[string][]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	routes := map[string][]string{}
	for _, value := range values {
		for _, v := range strings.Split(value, ";") {
			if strings.TrimSpace(v) == "" {
				continue
			}
			event, effects, err := ParseRoute(v)
			if err != nil {
				return nil, err
			}
			routes[event] = append(routes[event], effects...)
		}
	}
	return routes, nil
}
