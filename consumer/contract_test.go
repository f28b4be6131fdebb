package consumer_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/ferry-outbox/ferry/consumer"
)

func TestModuleGraphIsComplete(t *testing.T) {
	t.Parallel()
	require.NoError(t, fx.ValidateApp(fx.NopLogger, fx.Supply(consumer.Config{}), consumer.Module))
}
