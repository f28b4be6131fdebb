package e2e

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
)

// A port the embedded Temporal server has to bind is taken: Start returns
// the server's fatal error, naming the address, although the server's own
// logger is silent; the process neither hangs nor crashes. (With picked
// ports, the same error makes Start try again with new ones.)
func TestDevserverReportsATakenPort(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		index int // into the 7 internal ports
		want  string
	}{
		{"frontend membership", 0, "Failed to start ringpop listener"},
		{"history gRPC", 1, "Failed to start gRPC listener"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			held, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			t.Cleanup(func() { _ = held.Close() })
			taken := held.Addr().(*net.TCPAddr).Port
			ports := make([]string, 7)
			for i := range ports {
				ports[i] = strconv.Itoa(freePort(t))
			}
			ports[tt.index] = strconv.Itoa(taken)

			cmd := exec.Command(os.Args[0])
			out := &ferrytest.Buffer{}
			cmd.Stdout, cmd.Stderr = out, out
			cmd.Env = append(os.Environ(), childEnv+"=temporal", temporalAddrEnv+"="+ferrytest.ClosedAddr(t), temporalPortsEnv+"="+strings.Join(ports, ","))
			require.NoError(t, cmd.Start())
			c := &child{cmd: cmd, out: out, done: make(chan struct{})}
			go func() { c.err = cmd.Wait(); close(c.done) }()
			t.Cleanup(c.kill)
			c.waitExit(t, 90*time.Second)
			t.Logf("the server process said: %s", out.String())

			require.Equal(t, 1, cmd.ProcessState.ExitCode(), "an error returned, not a crash:\n%s", out.String())
			require.Contains(t, out.String(), tt.want)
			require.Contains(t, out.String(), "127.0.0.1:"+strconv.Itoa(taken))
			require.Contains(t, out.String(), "address already in use")
			require.NotContains(t, out.String(), temporalReady)
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
