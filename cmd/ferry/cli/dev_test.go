package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The production binary has no embedded server: `ferry dev` fails, before
// touching PostgreSQL or a port, and says what to run instead.
func TestDevWithoutEmbeddedServer(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.Equal(t, 1, Main([]string{"dev", "--no-demo"}, &out, &errOut, nil))
	require.Contains(t, errOut.String(), "no embedded Temporal server")
	require.Contains(t, errOut.String(), "ferry-dev dev")
	require.Contains(t, errOut.String(), "--temporal-address")
	require.Empty(t, out.String())
}
