package upcast

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Func lifts a payload from schema version v to v+1.
type Func func(payload []byte) ([]byte, error)

// Step is the upcaster from version From to From+1.
type Step struct {
	From int
	Fn   Func
}

var (
	// ErrInvalidVersion: the schema version is below 1 (or missing).
	ErrInvalidVersion = errors.New("invalid schema version")
	// ErrUnknownVersion: the schema version is newer than the consumer
	// knows; deploy a consumer that reads it.
	ErrUnknownVersion = errors.New("unknown schema version")
	// ErrNoUpcaster: the version is older than the consumer can upcast.
	ErrNoUpcaster = errors.New("no upcaster")
	// ErrUpcastFailed: an upcaster returned an error.
	ErrUpcastFailed = errors.New("upcast failed")
)

type typeSchema struct {
	current int
	steps   map[int]Func
}

// Registry maps event types to their current schema version and upcasters.
// An event type never registered is read at version 1 only. Register before
// use; Upcast is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	types map[string]typeSchema
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{types: map[string]typeSchema{}}
}

// Register declares that the handler reads eventType at schema version
// current, with steps to lift older versions. Versions below the lowest step
// are refused. Registering a type twice is an error.
func (r *Registry) Register(eventType string, current int, steps ...Step) error {
	if eventType == "" {
		return errors.New("upcast: Register: empty event type")
	}
	if current < 1 {
		return fmt.Errorf("upcast: Register %q: current version %d must be at least 1", eventType, current)
	}
	m := make(map[int]Func, len(steps))
	for _, s := range steps {
		switch {
		case s.Fn == nil:
			return fmt.Errorf("upcast: Register %q: step from v%d has no function", eventType, s.From)
		case s.From < 1 || s.From >= current:
			return fmt.Errorf("upcast: Register %q: step from v%d must start between v1 and v%d", eventType, s.From, current-1)
		}
		if _, dup := m[s.From]; dup {
			return fmt.Errorf("upcast: Register %q: two steps from v%d", eventType, s.From)
		}
		m[s.From] = s.Fn
	}
	// Steps must chain without holes up to current: a version that can be
	// lifted part of the way only is a registration bug, not a data problem.
	froms := make([]int, 0, len(m))
	for v := range m {
		froms = append(froms, v)
	}
	sort.Ints(froms)
	for i, v := range froms {
		if v != current-len(froms)+i {
			return fmt.Errorf("upcast: Register %q: steps must chain up to v%d without holes (have from %v)", eventType, current, froms)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.types == nil {
		r.types = map[string]typeSchema{}
	}
	if _, dup := r.types[eventType]; dup {
		return fmt.Errorf("upcast: Register %q: already registered", eventType)
	}
	r.types[eventType] = typeSchema{current: current, steps: m}
	return nil
}

// Current is the schema version the handler reads for eventType.
func (r *Registry) Current(eventType string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if t, ok := r.types[eventType]; ok {
		return t.current
	}
	return 1
}

// Upcast lifts payload of eventType from schema version to the current
// version and returns it with that version. It returns an error wrapping
// ErrInvalidVersion, ErrUnknownVersion, ErrNoUpcaster or ErrUpcastFailed.
func (r *Registry) Upcast(eventType string, version int, payload []byte) ([]byte, int, error) {
	r.mu.RLock()
	t, ok := r.types[eventType]
	r.mu.RUnlock()
	if !ok {
		t = typeSchema{current: 1}
	}
	switch {
	case version < 1:
		return nil, 0, fmt.Errorf("%w: %q has schema version %d; versions start at 1", ErrInvalidVersion, eventType, version)
	case version > t.current:
		return nil, 0, fmt.Errorf("%w: %q schema version %d is newer than this consumer reads (v%d)", ErrUnknownVersion, eventType, version, t.current)
	}
	for v := version; v < t.current; v++ {
		fn, ok := t.steps[v]
		if !ok {
			return nil, 0, fmt.Errorf("%w: %q schema version %d cannot be lifted to v%d (no upcaster from v%d)", ErrNoUpcaster, eventType, version, t.current, v)
		}
		var err error
		payload, err = fn(payload)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %q from v%d to v%d: %v", ErrUpcastFailed, eventType, v, v+1, err)
		}
	}
	return payload, t.current, nil
}
