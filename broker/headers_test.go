package broker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/broker"
)

// The header names are a wire contract with consumers already running: a
// rename must fail here, not in production.
func TestHeaderNamesAreTheWireContract(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ferry-aggregate-type", broker.HeaderAggregateType)
	require.Equal(t, "ferry-aggregate-id", broker.HeaderAggregateID)
	require.Equal(t, "ferry-aggregate-version", broker.HeaderAggregateVersion)
	require.Equal(t, "ferry-schema-version", broker.HeaderSchemaVersion)
	require.Equal(t, "traceparent", broker.HeaderTraceParent)
	require.Equal(t, "tracestate", broker.HeaderTraceState)
}
