package destination

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Action is what a destination does with an event.
type Action string

const (
	// Start starts a workflow with the envelope as its input. Its ID
	// defaults to "<name>/{event_id}", one workflow per event; a start whose
	// workflow exists already (running or closed) is a no-op.
	Start Action = "start"
	// Signal signals a running workflow with the envelope. A workflow
	// that does not exist (not started yet, or closed) fails the delivery,
	// which is retried like a broker failure and quarantined when the
	// event's retries run out.
	Signal Action = "signal"
	// SignalWithStart signals the workflow, starting it (without input)
	// when it is not running.
	SignalWithStart Action = "signal-with-start"
)

// Destination is one route of an event type to a workflow.
type Destination struct {
	// Event is "<aggregate_type>.<event_type>", e.g. "order.created".
	Event string
	// Name of the destination: 1-40 of a-z, 0-9, '_', '-', starting with a
	// letter. It is in the envelope, in the signal's request id and in the
	// default workflow ID, so renaming it re-delivers nothing but makes a
	// repeat look new.
	Name string
	// Action: Start, Signal or SignalWithStart.
	Action Action
	// WorkflowType to start (Start, SignalWithStart; required there).
	WorkflowType string
	// TaskQueue of the started workflow (Start, SignalWithStart; required
	// there): your worker's, not Ferry's.
	TaskQueue string
	// WorkflowID template. Default for Start "<name>/{event_id}"; required
	// for Signal and SignalWithStart. Placeholders: {aggregate_type},
	// {aggregate_id}, {aggregate_version}, {event_id}, {event_type},
	// {payload.<field>[.<field>…]} (a string, number or boolean).
	WorkflowID string
	// Signal name (Signal, SignalWithStart). Default: the event type.
	Signal string
	// SkipBroker: the event type is not published to RabbitMQ, only
	// delivered to its workflow destinations. Every destination of the
	// event type must say the same. Default false (both).
	SkipBroker bool
}

var (
	eventKey = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}\.[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}$`)
	destName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,39}$`)
)

// Parse reads one route: "<aggregate_type>.<event_type>=<action>:<name>"
// followed by ",key=value" options: type=<workflow type>, queue=<task
// queue>, id=<workflow ID template>, signal=<signal name>, broker=false.
// For example
//
//	order.created=start:fulfilment,type=Fulfilment,queue=orders,id=fulfilment-{aggregate_id}
//	order.paid=signal:fulfilment,id=fulfilment-{aggregate_id},signal=paid
//
// Values cannot hold ',' or ';'. Parse checks the syntax; NewRouter checks
// the route as a whole.
func Parse(spec string) (Destination, error) {
	example := "e.g. order.created=start:fulfilment,type=Fulfilment,queue=orders"
	event, rest, ok := strings.Cut(strings.TrimSpace(spec), "=")
	if !ok || strings.TrimSpace(event) == "" || strings.TrimSpace(rest) == "" {
		return Destination{}, fmt.Errorf("destination %q: use <aggregate_type>.<event_type>=<action>:<name>[,key=value…], %s", spec, example)
	}
	fields := strings.Split(rest, ",")
	action, name, ok := strings.Cut(strings.TrimSpace(fields[0]), ":")
	if !ok {
		return Destination{}, fmt.Errorf("destination %q: %q: use <action>:<name> (actions start, signal, signal-with-start), %s", spec, fields[0], example)
	}
	d := Destination{Event: strings.TrimSpace(event), Action: Action(action), Name: name}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, value, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || value == "" {
			return Destination{}, fmt.Errorf("destination %q: option %q: use key=value (keys type, queue, id, signal, broker)", spec, f)
		}
		if seen[key] {
			return Destination{}, fmt.Errorf("destination %q: option %q twice", spec, key)
		}
		seen[key] = true
		switch key {
		case "type":
			d.WorkflowType = value
		case "queue":
			d.TaskQueue = value
		case "id":
			d.WorkflowID = value
		case "signal":
			d.Signal = value
		case "broker":
			b, err := strconv.ParseBool(value)
			if err != nil {
				return Destination{}, fmt.Errorf("destination %q: broker=%q: use broker=false to skip RabbitMQ", spec, value)
			}
			d.SkipBroker = !b
		default:
			return Destination{}, fmt.Errorf("destination %q: unknown option %q (known: type, queue, id, signal, broker)", spec, key)
		}
	}
	return d, nil
}

// ParseAll reads route values (flags, environment, config file): a value
// may hold several routes separated by ';'.
func ParseAll(values []string) ([]Destination, error) {
	var out []Destination
	for _, value := range values {
		for _, spec := range strings.Split(value, ";") {
			if strings.TrimSpace(spec) == "" {
				continue
			}
			d, err := Parse(spec)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// String is the route in Parse's syntax.
func (d Destination) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=%s:%s", d.Event, d.Action, d.Name)
	for _, kv := range [][2]string{{"type", d.WorkflowType}, {"queue", d.TaskQueue}, {"id", d.WorkflowID}, {"signal", d.Signal}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, ",%s=%s", kv[0], kv[1])
		}
	}
	if d.SkipBroker {
		b.WriteString(",broker=false")
	}
	return b.String()
}

// Route is a destination as the router resolved it: defaults filled,
// template compiled.
type Route struct {
	Destination
	id template
}

// Router resolves the workflow destinations of an event type. Immutable
// after NewRouter, safe for concurrent use.
type Router struct {
	routes map[string][]Route
	skip   map[string]bool
}

// NewRouter checks every destination and fills its defaults. Its errors
// name the route.
func NewRouter(dests []Destination) (*Router, error) {
	r := &Router{routes: map[string][]Route{}, skip: map[string]bool{}}
	skipSet := map[string]bool{}
	for _, d := range dests {
		rt, err := resolve(d)
		if err != nil {
			return nil, fmt.Errorf("destination %s: %w", d, err)
		}
		for _, other := range r.routes[d.Event] {
			if other.Name == d.Name {
				return nil, fmt.Errorf("destination %s: %s has a destination named %q already", d, d.Event, d.Name)
			}
		}
		if len(r.routes[d.Event]) > 0 && skipSet[d.Event] != d.SkipBroker {
			return nil, fmt.Errorf("destination %s: broker=%t, but another destination of %s says broker=%t: give every destination of an event type the same", d, !d.SkipBroker, d.Event, !skipSet[d.Event])
		}
		skipSet[d.Event] = d.SkipBroker
		r.routes[d.Event] = append(r.routes[d.Event], rt)
		if d.SkipBroker {
			r.skip[d.Event] = true
		}
	}
	return r, nil
}

func resolve(d Destination) (Route, error) {
	switch {
	case !eventKey.MatchString(d.Event):
		return Route{}, fmt.Errorf("event %q: use <aggregate_type>.<event_type>, e.g. order.created", d.Event)
	case !destName.MatchString(d.Name):
		return Route{}, fmt.Errorf("name %q: use 1-40 of a-z, 0-9, '_', '-', starting with a letter", d.Name)
	}
	switch d.Action {
	case Start, SignalWithStart:
		if d.WorkflowType == "" {
			return Route{}, fmt.Errorf("%s needs type=<workflow type>", d.Action)
		}
		if d.TaskQueue == "" {
			return Route{}, fmt.Errorf("%s needs queue=<task queue> (your worker's)", d.Action)
		}
	case Signal:
		if d.WorkflowType != "" || d.TaskQueue != "" {
			return Route{}, fmt.Errorf("signal starts nothing, so type= and queue= do not apply (use signal-with-start)")
		}
	default:
		return Route{}, fmt.Errorf("unknown action %q (known: start, signal, signal-with-start)", d.Action)
	}
	if d.Action == Start {
		if d.Signal != "" {
			return Route{}, fmt.Errorf("start sends no signal, so signal= does not apply")
		}
		if d.WorkflowID == "" {
			d.WorkflowID = d.Name + "/{event_id}"
		}
	} else {
		if d.WorkflowID == "" {
			return Route{}, fmt.Errorf("%s needs id=<workflow ID template>, e.g. id=fulfilment-{aggregate_id}", d.Action)
		}
		if d.Signal == "" {
			_, d.Signal, _ = strings.Cut(d.Event, ".")
			// The event type is what follows the aggregate type; an
			// aggregate type with dots makes the cut ambiguous, so name it.
			if strings.Count(d.Event, ".") > 1 {
				return Route{}, fmt.Errorf("%s: name the signal (signal=<name>): %q has more than one '.'", d.Action, d.Event)
			}
		}
	}
	for _, kv := range [][2]string{{"type", d.WorkflowType}, {"queue", d.TaskQueue}, {"signal", d.Signal}} {
		if kv[1] != "" && !temporalName(kv[1]) {
			return Route{}, fmt.Errorf("%s=%q: use 1-200 printable ASCII characters, without ',' or ';' and not starting or ending with a space", kv[0], kv[1])
		}
	}
	id, err := compileTemplate(d.WorkflowID)
	if err != nil {
		return Route{}, fmt.Errorf("id: %w", err)
	}
	return Route{Destination: d, id: id}, nil
}

// For returns the destinations of an event type, in route order (nil for
// none), and whether the event type skips RabbitMQ.
func (r *Router) For(aggregateType, eventType string) (routes []Route, skipBroker bool) {
	if r == nil {
		return nil, false
	}
	key := aggregateType + "." + eventType
	return r.routes[key], r.skip[key]
}

// Len is the number of destinations.
func (r *Router) Len() int {
	if r == nil {
		return 0
	}
	n := 0
	for _, rs := range r.routes {
		n += len(rs)
	}
	return n
}

// Events are the event types with destinations, sorted.
func (r *Router) Events() []string {
	return slices.Sorted(maps.Keys(r.routes))
}

// RenderID is the workflow ID the route gives ev's workflow.
func (rt Route) RenderID(ev Envelope) (string, error) {
	return rt.id.render(ev)
}

// temporalName: a workflow type, task queue or signal name as the route
// syntax can carry it and Temporal takes it.
func temporalName(s string) bool {
	return len(s) <= 200 && printable(s) && !strings.ContainsAny(s, ",;") && strings.TrimSpace(s) == s
}
