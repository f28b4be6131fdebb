package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/workflows"
)

// EnsureSearchAttributes checks that Ferry's search attributes are
// registered on the namespace. With create, it registers the missing ones
// and returns their names; without, a missing one is an error that says how
// to register it.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string, create bool) ([]string, error) {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("list search attributes of namespace %q: %w", namespace, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	var names []string
	for name, typ := range workflows.SearchAttributeTypes {
		got, ok := resp.CustomAttributes[name]
		if ok && got != typ {
			return nil, fmt.Errorf("search attribute %s of namespace %q has type %s, Ferry needs %s", name, namespace, got, typ)
		}
		if !ok {
			missing[name] = typ
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(missing) == 0 {
		return nil, nil
	}
	if !create {
		var cmds []string
		for _, n := range names {
			cmds = append(cmds, fmt.Sprintf("temporal operator search-attribute create --namespace %s --name %s --type %s",
				namespace, n, typeName(missing[n])))
		}
		return nil, fmt.Errorf("Temporal namespace %q lacks Ferry's search attributes %s\n  Run `ferry setup-temporal` once, or:\n  %s",
			namespace, strings.Join(names, ", "), strings.Join(cmds, "\n  "))
	}
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing,
	}); err != nil {
		return nil, fmt.Errorf("register search attributes %s on namespace %q: %w", strings.Join(names, ", "), namespace, err)
	}
	return names, nil
}

func typeName(t enumspb.IndexedValueType) string {
	switch t {
	case enumspb.INDEXED_VALUE_TYPE_BOOL:
		return "Bool"
	case enumspb.INDEXED_VALUE_TYPE_DATETIME:
		return "Datetime"
	default:
		return "Keyword"
	}
}
