package e2e

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// Every command docker-compose.yml runs with the ferry image is a command
// this binary has (compose_test.go checks the file's structure; only a test
// that links the command can check this).
func TestComposeRunsRealCommands(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var c struct {
		Services map[string]struct {
			Build       any      `yaml:"build"`
			Command     []string `yaml:"command"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &c))
	checked := 0
	for name, s := range c.Services {
		if s.Build == nil {
			continue
		}
		require.NotEmpty(t, s.Command, name)
		runs := [][]string{s.Command}
		if len(s.Healthcheck.Test) > 2 && s.Healthcheck.Test[1] == "/ferry" {
			runs = append(runs, s.Healthcheck.Test[2:])
		}
		for _, args := range runs {
			code, out := ferry(t, nil, append(args, "--help")...)
			require.Equal(t, 0, code, "service %s runs `ferry %v`, which this binary does not know:\n%s", name, args, out)
			checked++
		}
	}
	require.GreaterOrEqual(t, checked, 5)
}
