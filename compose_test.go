package ferry_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

type service struct {
	Image       string   `yaml:"image"`
	Build       any      `yaml:"build"`
	Command     []string `yaml:"command"`
	Ports       []string `yaml:"ports"`
	Expose      []string `yaml:"expose"`
	Healthcheck struct {
		Test    []string `yaml:"test"`
		Disable bool     `yaml:"disable"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Environment map[string]string `yaml:"environment"`
	Deploy      struct {
		Replicas int `yaml:"replicas"`
	} `yaml:"deploy"`
	Restart string `yaml:"restart"`
}

type compose struct {
	Services map[string]service `yaml:"services"`
}

func loadCompose(t *testing.T) (compose, string) {
	t.Helper()
	raw, err := os.ReadFile("docker-compose.yml")
	require.NoError(t, err)
	var c compose
	require.NoError(t, yaml.Unmarshal(raw, &c), "docker-compose.yml is not valid YAML")
	return c, string(raw)
}

// docker-compose.yml cannot run here (no Docker engine), so its structure
// is checked instead: the services exist with pinned images and health
// checks, ports stay on localhost, dependencies wait for what they need, and
// no password has a default.
func TestDockerComposeIsConsistent(t *testing.T) {
	t.Parallel()
	c, raw := loadCompose(t)

	// Jobs run to completion; everything else is checked for health.
	jobs := []string{"ferry-migrate", "ferry-setup-temporal"}
	for _, name := range []string{"postgres", "rabbitmq", "temporal", "temporal-ui", "ferry-migrate", "ferry-setup-temporal",
		"ferry-worker", "ferry-poller", "ferry-consumer"} {
		require.Contains(t, c.Services, name)
	}
	pinned := regexp.MustCompile(`^[a-z0-9./_-]+:[0-9][A-Za-z0-9._-]*$`)
	for name, s := range c.Services {
		require.True(t, s.Image != "" || s.Build != nil, "service %s has neither image nor build", name)
		if s.Build == nil {
			require.Regexp(t, pinned, s.Image, "service %s: pin the image to a version", name)
		}
		for _, p := range s.Ports {
			require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "service %s publishes %q beyond localhost", name, p)
		}
		if slices.Contains(jobs, name) {
			require.Equal(t, "no", s.Restart, "job %s must not restart", name)
		} else {
			require.False(t, s.Healthcheck.Disable, "service %s: health check disabled", name)
			require.NotEmpty(t, s.Healthcheck.Test, "service %s has no health check", name)
			require.NotEqual(t, "no", s.Restart, "service %s must restart", name)
		}
		for dep, cond := range s.DependsOn {
			target, ok := c.Services[dep]
			require.True(t, ok, "service %s depends on unknown service %s", name, dep)
			switch cond.Condition {
			case "service_healthy":
				require.NotEmpty(t, target.Healthcheck.Test, "service %s waits for %s to be healthy, but it has no health check", name, dep)
			case "service_completed_successfully":
				require.Contains(t, jobs, dep, "service %s waits for %s to complete, but it is no job", name, dep)
			case "service_started":
			default:
				t.Fatalf("service %s: condition %q on %s", name, cond.Condition, dep)
			}
		}
		for k, v := range s.Environment {
			if strings.Contains(k, "PASS") || strings.Contains(k, "PWD") || strings.HasSuffix(k, "_URL") {
				require.NotContains(t, v, ":-", "service %s: %s must not have a default password", name, k)
				require.NotContains(t, v, "guest", "service %s: %s uses the guest account", name, k)
			}
		}
	}
	// Every password comes from the environment and is required.
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]*(?:PASSWORD|PASS|PWD)[A-Z_]*)([^}]*)\}`).FindAllStringSubmatch(raw, -1) {
		require.True(t, strings.HasPrefix(m[2], ":?"), "${%s%s}: a password must be required (:?), never defaulted", m[1], m[2])
	}

	// The dependency order: PostgreSQL → Temporal → search attributes and
	// migrations → worker and pollers; the consumer after the tables.
	requireDependsOn(t, c, "temporal", "postgres", "service_healthy")
	requireDependsOn(t, c, "temporal-ui", "temporal", "service_healthy")
	requireDependsOn(t, c, "ferry-migrate", "postgres", "service_healthy")
	for _, relay := range []string{"ferry-worker", "ferry-poller"} {
		requireDependsOn(t, c, relay, "ferry-migrate", "service_completed_successfully")
		requireDependsOn(t, c, relay, "ferry-setup-temporal", "service_completed_successfully")
		requireDependsOn(t, c, relay, "temporal", "service_healthy")
	}
	requireDependsOn(t, c, "ferry-worker", "rabbitmq", "service_healthy")
	requireDependsOn(t, c, "ferry-setup-temporal", "temporal", "service_healthy")
	requireDependsOn(t, c, "ferry-consumer", "ferry-migrate", "service_completed_successfully")
	requireDependsOn(t, c, "ferry-consumer", "rabbitmq", "service_healthy")

	// Ferry runs as separate poller and worker services, two pollers.
	require.Equal(t, []string{"migrate"}, c.Services["ferry-migrate"].Command)
	require.Equal(t, []string{"setup-temporal"}, c.Services["ferry-setup-temporal"].Command)
	require.Equal(t, []string{"consume-example"}, c.Services["ferry-consumer"].Command)
	require.Equal(t, []string{"worker"}, c.Services["ferry-worker"].Command)
	require.Equal(t, []string{"poller"}, c.Services["ferry-poller"].Command)
	require.Equal(t, 2, c.Services["ferry-poller"].Deploy.Replicas)
	// The health check runs the image's binary (no shell or curl in it).
	for _, name := range []string{"ferry-worker", "ferry-poller", "ferry-consumer"} {
		require.Equal(t, []string{"CMD", "/ferry", "ping"}, c.Services[name].Healthcheck.Test, name)
		// Every Ferry process serves /metrics, on the compose network.
		require.Equal(t, "0.0.0.0:9090", c.Services[name].Environment["FERRY_METRICS_ADDRESS"], name)
		require.Contains(t, c.Services[name].Expose, "9090", name)
	}
	require.Contains(t, c.Services["rabbitmq"].Image, "-management", "RabbitMQ with its management UI")
	require.Contains(t, c.Services["rabbitmq"].Ports, "127.0.0.1:15672:15672", "management UI on localhost")
	require.Equal(t, "postgres12", c.Services["temporal"].Environment["DB"], "Temporal persists in PostgreSQL")
}

func requireDependsOn(t *testing.T, c compose, service, dep, condition string) {
	t.Helper()
	d, ok := c.Services[service].DependsOn[dep]
	require.True(t, ok, "%s must depend on %s", service, dep)
	require.Equal(t, condition, d.Condition, "%s on %s", service, dep)
}

// runtimeStage is the Dockerfile's final stage, less comments: nothing but
// the content deploy/image/rootfs.sh made in the build stage, run as
// nonroot (65532; numeric, so that a runAsNonRoot policy can check it
// without the image's /etc/passwd). dev/e2e/image_test.go builds this very
// stage with buildah, from a rootfs.sh run on the machine's Debian
// packages, and runs ferry in it.
const runtimeStage = `FROM scratch
COPY --from=build /out/rootfs/ /
USER 65532:65532
ENTRYPOINT ["/ferry"]
CMD ["--help"]
`

// The Dockerfile builds the production command module (cmd/ferry, no
// embedded Temporal server) with the Go version of go.mod, without cgo and
// with the commit `ferry version` prints, into the runtime content of
// deploy/image/rootfs.sh; its final stage is runtimeStage.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	mod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	require.NotNil(t, goVersion, "go.mod has no go directive")

	var froms []string
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "FROM" {
			froms = append(froms, f[1])
		}
	}
	require.Len(t, froms, 2, "a build stage and the final stage")
	require.True(t, strings.HasPrefix(froms[0], "golang:"+string(goVersion[1])), "build stage %s: use go.mod's Go %s", froms[0], goVersion[1])
	df := string(raw)
	build := df[:strings.LastIndex(df, "\nFROM ")]
	require.Regexp(t, `cd cmd/ferry && CGO_ENABLED=0 go build .* \.\n`, build, "the image carries the production binary, not ferry-dev")
	require.Contains(t, build, `-X github.com/ferry-outbox/ferry/cmd/ferry/cli.commit=${FERRY_COMMIT}`, "ferry version's commit (the context has no .git)")
	require.Contains(t, build, "\nRUN deploy/image/rootfs.sh /out/ferry /out/rootfs\n", "the runtime content comes from the script the image test runs")
	_, err = os.Stat("deploy/image/rootfs.sh")
	require.NoError(t, err)
	ignore, err := os.ReadFile(".dockerignore")
	require.NoError(t, err)
	require.Contains(t, strings.Fields(string(ignore)), ".git/", "so the build has no VCS stamp, and the commit comes from FERRY_COMMIT")

	var final strings.Builder
	for _, line := range strings.Split(df[strings.LastIndex(df, "\nFROM ")+1:], "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			final.WriteString(line + "\n")
		}
	}
	require.Equal(t, runtimeStage, final.String(), "the final stage is the one the image test builds")
}

// docs/deployment.md says plainly which versions the tests run and which
// the compose file pins: it names every image of the file and the Temporal
// server and UI server versions the dev module's tests embed, so a bump of
// either side without the page fails here.
func TestDeploymentPageNamesComposeAndTestedVersions(t *testing.T) {
	t.Parallel()
	c, _ := loadCompose(t)
	page, err := os.ReadFile("docs/deployment.md")
	require.NoError(t, err)
	_, versions, ok := strings.Cut(string(page), "**Versions: what the tests run, and what the compose file pins.**")
	require.True(t, ok, "docs/deployment.md has no versions paragraph")
	versions, _, _ = strings.Cut(versions, "\n\n")
	versions = strings.Join(strings.Fields(versions), " ")
	for name, s := range c.Services {
		if s.Build == nil {
			require.Contains(t, versions, "`"+s.Image+"`", "service %s's image", name)
		}
	}
	mod, err := os.ReadFile("dev/go.mod")
	require.NoError(t, err)
	for _, m := range []struct{ module, doc string }{
		{"go.temporal.io/server", "the Temporal server %s"},
		{"github.com/temporalio/ui-server/v2", "Temporal UI server %s"},
	} {
		v := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(m.module) + ` v(\S+)`).FindSubmatch(mod)
		require.NotNil(t, v, "dev/go.mod requires %s", m.module)
		require.Contains(t, versions, fmt.Sprintf(m.doc, v[1]), "the tested %s", m.module)
	}
}
