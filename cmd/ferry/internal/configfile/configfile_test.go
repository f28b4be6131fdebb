package configfile_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/cmd/ferry/internal/configfile"
)

type settings struct {
	url   string
	batch int
	lease time.Duration
	tls   bool
	queue string
}

// flags mimics the ferry command: each default already holds its
// environment variable's value, as the command reads them at definition.
func flags(t *testing.T, args ...string) (*pflag.FlagSet, *settings) {
	t.Helper()
	s := &settings{}
	fs := pflag.NewFlagSet("ferry", pflag.ContinueOnError)
	fs.StringVar(&s.url, "postgres-url", "postgres://default", "PostgreSQL URL (FERRY_TEST_CF_POSTGRES_URL)")
	fs.IntVar(&s.batch, "batch-size", 200, "rows per claim (FERRY_TEST_CF_BATCH_SIZE)")
	fs.DurationVar(&s.lease, "lease", 30*time.Second, "lease (FERRY_TEST_CF_LEASE)")
	fs.BoolVar(&s.tls, "temporal-tls", false, "TLS (FERRY_TEST_CF_TLS)")
	fs.StringVar(&s.queue, "task-queue", "ferry", "task queue (FERRY_TEST_CF_TASK_QUEUE)")
	require.NoError(t, fs.Parse(args))
	return fs, s
}

var known = []string{"postgres-url", "batch-size", "lease", "temporal-tls", "task-queue", "data-dir"}

func file(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ferry.yaml")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// No t.Parallel: one case sets an environment variable.
func TestApplyPrecedence(t *testing.T) {
	path := file(t, `
# comments are fine
postgres-url: postgres://ferry:pw@db:5432/app?sslmode=verify-full
batch-size: 500
lease: 45s
temporal-tls: true
task-queue: from-file
data-dir: /var/lib/ferry   # dev's setting: skipped by other commands
`)
	t.Setenv("FERRY_TEST_CF_TASK_QUEUE", "from-env")
	fs, s := flags(t, "--batch-size", "7")
	require.NoError(t, configfile.Apply(fs, known, path))
	require.Equal(t, "postgres://ferry:pw@db:5432/app?sslmode=verify-full", s.url, "file over default")
	require.Equal(t, 7, s.batch, "command line over file")
	require.Equal(t, 45*time.Second, s.lease)
	require.True(t, s.tls)
	require.Equal(t, "ferry", s.queue, "environment over file (the env value is the flag's default)")
}

func TestApplyEmptyFile(t *testing.T) {
	t.Parallel()
	fs, s := flags(t)
	require.NoError(t, configfile.Apply(fs, known, file(t, "")))
	require.Equal(t, 200, s.batch)
}

func TestApplyRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		want    string
	}{
		{"typo", "batch-sise: 5\n", `ferry.yaml:1: batch-sise: no such setting`},
		{"not a mapping", "- a\n- b\n", "must be a mapping"},
		{"list value", "lease:\n  - 1s\n", "lease: must be a single value"},
		{"twice", "lease: 1s\nlease: 2s\n", "ferry.yaml:2: lease: set twice"},
		{"bad duration", "lease: soon\n", "ferry.yaml:1: lease: not a valid duration"},
		{"bad int", "batch-size: many\n", "batch-size: not a valid int"},
		{"bad YAML", "postgres-url: [\n", "config file"},
		// Whatever fails, a value is never echoed: it may hold a password.
		{"secret in a bad value", "batch-size: postgres://u:topsecret@h/\n", "batch-size: not a valid int"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs, _ := flags(t)
			err := configfile.Apply(fs, known, file(t, tt.content))
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "topsecret")
		})
	}
	fs, _ := flags(t)
	require.ErrorContains(t, configfile.Apply(fs, known, "/nonexistent/ferry.yaml"), "no such file")
}

func TestEnvOf(t *testing.T) {
	t.Parallel()
	fs, _ := flags(t)
	name, ok := configfile.EnvOf(fs.Lookup("lease"))
	require.True(t, ok)
	require.Equal(t, "FERRY_TEST_CF_LEASE", name)
	_, ok = configfile.EnvOf(&pflag.Flag{Usage: "no variable"})
	require.False(t, ok)

	// A list names its variable among other words: --policy, --effect.
	name, ok = configfile.EnvOf(&pflag.Flag{Usage: "TYPE * for the rest (repeatable; FERRY_POLICY, ';'-separated)"})
	require.True(t, ok)
	require.Equal(t, "FERRY_POLICY", name)
	_, ok = configfile.EnvOf(&pflag.Flag{Usage: "see (FERRY_X) in the middle (not the end)"})
	require.False(t, ok)
}
