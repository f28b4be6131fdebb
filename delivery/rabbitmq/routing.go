package rabbitmq

import (
	"fmt"
	"regexp"
	"strings"
)

// DefaultRoutingKeyTemplate is the routing key of DefaultRoutingKey as a
// template.
const DefaultRoutingKeyTemplate = "{aggregate_type}.{event_type}"

// DefaultRoutingKey is "<aggregate_type>.<event_type>".
func DefaultRoutingKey(aggregateType, eventType string) string {
	return aggregateType + "." + eventType
}

var templateText = regexp.MustCompile(`^[A-Za-z0-9_.:-]*$`)

// RoutingKeyTemplate turns a template such as "events.{aggregate_type}" into
// a routing key function. It knows {aggregate_type} and {event_type}; the
// rest must be plain routing-key text.
func RoutingKeyTemplate(tmpl string) (func(aggregateType, eventType string) string, error) {
	if tmpl == "" {
		return nil, fmt.Errorf("routing key template is empty: use e.g. %q", DefaultRoutingKeyTemplate)
	}
	rest := strings.NewReplacer("{aggregate_type}", "", "{event_type}", "").Replace(tmpl)
	if !templateText.MatchString(rest) {
		return nil, fmt.Errorf("routing key template %q: only {aggregate_type}, {event_type}, letters, digits, '_', '.', ':' and '-' are allowed", tmpl)
	}
	if len(tmpl) > 255 {
		return nil, fmt.Errorf("routing key template %q: longer than AMQP's 255 bytes", tmpl)
	}
	if tmpl == DefaultRoutingKeyTemplate {
		return DefaultRoutingKey, nil
	}
	return func(aggregateType, eventType string) string {
		return strings.NewReplacer("{aggregate_type}", aggregateType, "{event_type}", eventType).Replace(tmpl)
	}, nil
}
