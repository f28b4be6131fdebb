package ferry_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

type compose struct {
	Services map[string]struct {
		Image       string         `yaml:"image"`
		Build       any            `yaml:"build"`
		Ports       []string       `yaml:"ports"`
		Healthcheck map[string]any `yaml:"healthcheck"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Environment map[string]string `yaml:"environment"`
	} `yaml:"services"`
}

// docker-compose.yml cannot run here (no Docker engine), so its structure
// is checked instead: the services exist, ports stay on localhost,
// dependencies point at services with the health checks they wait for, and
// no password has a default.
func TestDockerComposeIsConsistent(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("docker-compose.yml")
	require.NoError(t, err)
	var c compose
	require.NoError(t, yaml.Unmarshal(raw, &c), "docker-compose.yml is not valid YAML")

	for _, name := range []string{"postgres", "rabbitmq", "temporal", "temporal-ui", "ferry-migrate", "ferry"} {
		require.Contains(t, c.Services, name)
	}
	for name, s := range c.Services {
		require.True(t, s.Image != "" || s.Build != nil, "service %s has neither image nor build", name)
		for _, p := range s.Ports {
			require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "service %s publishes %q beyond localhost", name, p)
		}
		for dep, cond := range s.DependsOn {
			target, ok := c.Services[dep]
			require.True(t, ok, "service %s depends on unknown service %s", name, dep)
			require.True(t, slices.Contains([]string{"service_healthy", "service_completed_successfully", "service_started"}, cond.Condition),
				"service %s: condition %q on %s", name, cond.Condition, dep)
			if cond.Condition == "service_healthy" {
				require.NotEmpty(t, target.Healthcheck, "service %s waits for %s to be healthy, but it has no healthcheck", name, dep)
			}
		}
		for k, v := range s.Environment {
			if strings.Contains(k, "PASS") || strings.Contains(k, "PWD") || strings.HasSuffix(k, "_URL") {
				require.NotRegexp(t, `:-`, v, "service %s: %s must not have a default password", name, k)
			}
		}
	}
	require.Equal(t, []string{"run"}, commandOf(t, raw, "ferry"))
}

func commandOf(t *testing.T, raw []byte, service string) []string {
	t.Helper()
	var c struct {
		Services map[string]struct {
			Command []string `yaml:"command"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &c))
	return c.Services[service].Command
}
