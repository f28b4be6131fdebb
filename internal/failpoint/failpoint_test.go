//go:build failpoints

package failpoint

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// childEnv makes the re-executed test binary hit a failpoint instead of
// running tests.
const childEnv = "FAILPOINT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		for range 5 {
			Inject("test.point")
			os.Stdout.WriteString("survived\n")
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func TestParse(t *testing.T) {
	t.Parallel()
	type want struct {
		action action
		sleep  time.Duration
		at     int64
	}
	tests := []struct {
		spec    string
		want    map[string]want
		wantErr string
	}{
		{spec: "a=exit", want: map[string]want{"a": {action: actExit, at: 1}}},
		{spec: " a = exit@3 , b=sleep(250ms) ,", want: map[string]want{
			"a": {action: actExit, at: 3},
			"b": {action: actSleep, sleep: 250 * time.Millisecond, at: 1},
		}},
		{spec: "b=sleep(1s)@2", want: map[string]want{"b": {action: actSleep, sleep: time.Second, at: 2}}},
		{spec: ",", want: nil},
		{spec: "a", wantErr: "want name=action"},
		{spec: "=exit", wantErr: "want name=action"},
		{spec: "a=", wantErr: "want name=action"},
		{spec: "a=exit@0", wantErr: "whole number"},
		{spec: "a=exit@x", wantErr: "whole number"},
		{spec: "a=sleep(soon)", wantErr: "sleep wants a duration"},
		{spec: "a=panic", wantErr: `unknown action "panic"`},
		{spec: "a=exit,a=exit@2", wantErr: "set twice"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			t.Parallel()
			got, err := parse(tt.spec)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			if tt.want == nil {
				require.Nil(t, got)
				return
			}
			require.Len(t, got, len(tt.want))
			for name, w := range tt.want {
				g := got[name]
				require.NotNil(t, g, name)
				require.Equal(t, w.action, g.action, name)
				require.Equal(t, w.sleep, g.sleep, name)
				require.Equal(t, w.at, g.at, name)
			}
		})
	}
}

// Unset, every point is inert (this process has no FERRY_FAILPOINTS).
func TestInertWithoutTheVariable(t *testing.T) {
	require.Empty(t, os.Getenv(EnvVar), "run the tests without %s", EnvVar)
	for range 3 {
		Inject("poller.after-claim")
	}
	require.Nil(t, load())
}

// exit@3 kills the process on the third hit, by SIGKILL, after one line on
// stderr; the first two hits do nothing.
func TestExitKillsOnTheNthHit(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", EnvVar+"=other=exit,test.point=exit@3")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	require.True(t, errors.As(err, &exitErr), "want the child killed, got %v", err)
	ws := exitErr.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled(), "killed by a signal")
	require.Equal(t, syscall.SIGKILL, ws.Signal())
	require.Equal(t, "survived\nsurvived\n", stdout.String())
	require.Regexp(t, `^failpoint test.point: killing process \d+ \(hit 3\)\n$`, stderr.String())
}

// A malformed variable panics at the first Inject rather than testing nothing.
func TestMalformedVariablePanics(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", EnvVar+"=test.point=explode")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `failpoint: FERRY_FAILPOINTS="test.point=explode": entry "test.point=explode": unknown action "explode"`)
	require.NotContains(t, string(out), "survived")
}
