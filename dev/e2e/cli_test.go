package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/schema"
)

// ferry runs the ferry command in a child process and returns its exit code
// and combined output.
func ferry(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	out, err := cmd.CombinedOutput()
	if exitErr, ok := err.(*exec.ExitError); ok {
		return exitErr.ExitCode(), string(out)
	}
	require.NoError(t, err, "run ferry %v", args)
	return 0, string(out)
}

// What a tired operator sees: one line that says what is unreachable and
// what to set, no stack trace, no password.
func TestCommandsExplainUnreachableServices(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	dead := ferrytest.ClosedAddr(t)
	cases := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{
			name: "migrate without PostgreSQL",
			env:  []string{"FERRY_POSTGRES_URL=postgres://ferry:topsecret@" + dead + "/db"},
			args: []string{"migrate"},
			want: []string{"cannot reach PostgreSQL at postgres://ferry:xxxxx@" + dead, "FERRY_POSTGRES_URL"},
		},
		{
			name: "run without RabbitMQ",
			env: []string{"FERRY_POSTGRES_URL=" + db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporalAddr, "FERRY_TEMPORAL_NAMESPACE=" + namespace,
				"FERRY_AMQP_URL=amqp://guest:topsecret@" + dead + "/"},
			args: []string{"run"},
			want: []string{"cannot reach RabbitMQ at amqp://guest:xxxxx@" + dead, "FERRY_AMQP_URL"},
		},
		{
			name: "run without Temporal",
			env:  []string{"FERRY_POSTGRES_URL=" + db.URL, "FERRY_TEMPORAL_ADDRESS=" + dead},
			args: []string{"run", "--log-level", "error"},
			want: []string{"cannot reach Temporal at " + dead, "FERRY_TEMPORAL_ADDRESS"},
		},
		{
			name: "lease too short",
			env:  []string{"FERRY_POSTGRES_URL=" + db.URL, "FERRY_TEMPORAL_ADDRESS=" + temporalAddr, "FERRY_TEMPORAL_NAMESPACE=" + namespace},
			args: []string{"poller", "--lease", "3s"},
			want: []string{"--lease (FERRY_LEASE) must exceed the signal timeout 5s + the mark timeout 5s, got 3s"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out := ferry(t, tc.env, tc.args...)
			require.Equal(t, 1, code, "exit code; output:\n%s", out)
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
			require.NotContains(t, out, "topsecret")
			require.NotContains(t, out, "goroutine ")
			require.NotContains(t, out, "panic")
			require.LessOrEqual(t, strings.Count(strings.TrimSpace(out), "\n"), 3, "short output:\n%s", out)
		})
	}
}

func TestMigrateReportsWhatItDid(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "") // already migrated
	code, out := ferry(t, []string{"FERRY_POSTGRES_URL=" + db.URL}, "migrate")
	require.Equal(t, 0, code, out)
	ms, err := schema.Migrations()
	require.NoError(t, err)
	require.Contains(t, out, fmt.Sprintf("schema is at version %d", len(ms)))
	require.Contains(t, out, "nothing to do")
}
