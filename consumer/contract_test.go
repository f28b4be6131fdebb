package consumer_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/consumer"
)

// The consumer reads the headers the relay writes: a rename on either side
// must fail here, not in production.
func TestHeadersAreTheRelays(t *testing.T) {
	t.Parallel()
	require.Equal(t, activities.HeaderAggregateType, consumer.HeaderAggregateType)
	require.Equal(t, activities.HeaderAggregateID, consumer.HeaderAggregateID)
	require.Equal(t, activities.HeaderAggregateVersion, consumer.HeaderAggregateVersion)
	require.Equal(t, activities.HeaderSchemaVersion, consumer.HeaderSchemaVersion)
}

func TestModuleGraphIsComplete(t *testing.T) {
	t.Parallel()
	require.NoError(t, fx.ValidateApp(fx.NopLogger, fx.Supply(consumer.Config{}), consumer.Module))
}
