package workflows

import enumspb "go.temporal.io/api/enums/v1"

// SearchAttributeTypes are the custom search attributes Ferry's workflows
// set. They must be registered on the namespace before a worker starts
// (`ferry setup-temporal` does it; `ferry dev` registers them on the
// embedded server).
var SearchAttributeTypes = map[string]enumspb.IndexedValueType{
	SABlocked:          enumspb.INDEXED_VALUE_TYPE_BOOL,
	SABlockedEventID:   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	SABlockedEventType: enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	SAErrorClass:       enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	SABlockedSince:     enumspb.INDEXED_VALUE_TYPE_DATETIME,
}
