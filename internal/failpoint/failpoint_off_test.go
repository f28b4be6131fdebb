//go:build !failpoints

package failpoint

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

const childEnv = "FAILPOINT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		for range 5 {
			Inject("test.point")
		}
		os.Stdout.WriteString("survived\n")
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// Without the build tag a failpoint does nothing, even when the variable
// asks for a kill or is malformed: production binaries cannot be stopped
// by an environment variable.
func TestInertWithoutTheTag(t *testing.T) {
	t.Parallel()
	require.False(t, Enabled)
	for _, spec := range []string{"test.point=exit", "test.point=explode"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", EnvVar+"="+spec)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", spec, out)
		require.Equal(t, "survived\n", string(out), spec)
	}
}
