package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
)

// goModVersion is the version module path is required at in the go.mod at
// file.
func goModVersion(t *testing.T, file, path string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(path) + `\s+(v\S+)`).FindSubmatch(raw)
	require.NotNil(t, m, "%s requires no %s", file, path)
	return string(m[1])
}

// `ferry version` reads no configuration (a broken --config does not hide
// which binary this is) and prints the Go toolchain, the Temporal SDK this
// module links and the servers of testedWith.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	require.Equal(t, 0, Main([]string{"version", "--config", missing}, &out, &errOut, nil), errOut.String())
	require.Empty(t, errOut.String())
	text := out.String()
	require.Contains(t, text, "ferry (devel) (github.com/ferry-outbox/ferry/cmd/ferry)\n", "a test binary has no module version")
	require.Regexp(t, `(?m)^go: +go1\.\d+`, text)
	require.Contains(t, text, "temporal sdk: "+strings.TrimPrefix(goModVersion(t, "../go.mod", "go.temporal.io/sdk"), "v")+"\n")
	require.Contains(t, text, "tested with:  Temporal 1.32.1, RabbitMQ 3.10, PostgreSQL 15\n")
	require.Contains(t, text, "commit:       unknown: built without a VCS stamp or -ldflags", "a test binary has no VCS stamp")
}

// Where the commit comes from, in each kind of build.
func TestVersionCommit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    build
		want string
	}{
		{"VCS stamp", build{Path: rootModule + "/cmd/ferry", Version: "(devel)", Commit: "3f2a", CommitTime: "2026-01-02T03:04:05Z", Modified: true},
			"commit:       3f2a (2026-01-02T03:04:05Z, with uncommitted changes)\n"},
		{"-ldflags only", build{Path: rootModule + "/cmd/ferry", Version: "(devel)", Commit: "3f2a"},
			"commit:       3f2a\n"},
		{"go install …@version", build{Path: rootModule + "/cmd/ferry", Version: "v0.3.0"},
			"commit:       not stamped; the release tag cmd/ferry/v0.3.0 names it\n"},
		{"ferry-dev installed by version", build{Path: rootModule + "/dev", Version: "v0.3.0"},
			"commit:       not stamped; the release tag dev/v0.3.0 names it\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			tt.b.print(&out)
			require.Contains(t, out.String(), tt.want)
			require.True(t, strings.HasPrefix(out.String(), "ferry "+tt.b.Version+" ("+tt.b.Path+")\n"), out.String())
		})
	}
}

// The -ldflags values fill what the build info lacks. Not parallel: it sets
// the package's link-time variables.
func TestVersionFromLdflags(t *testing.T) {
	commit, version = "0123abcd", "v0.9.1"
	t.Cleanup(func() { commit, version = "", "" })
	b := readBuild()
	require.Equal(t, "0123abcd", b.Commit, "a test binary has no VCS stamp: -ldflags' commit")
	require.Equal(t, "v0.9.1", b.Version)
}

// testedWith says what the suite really runs against: the Temporal server
// the dev module embeds (the e2e suite's) and the major versions of the
// PostgreSQL and RabbitMQ the tests reach.
func TestTestedWithIsWhatTheTestsUse(t *testing.T) {
	t.Parallel()
	tested := map[string]string{}
	for _, s := range testedWith {
		tested[s.name] = s.version
	}
	require.Len(t, tested, 3)

	require.Equal(t, "v"+tested["Temporal"], goModVersion(t, "../../../dev/go.mod", "go.temporal.io/server"),
		"the dev module embeds another Temporal server than testedWith says: update testedWith")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, ferrytest.PostgresURL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var pg string
	require.NoError(t, conn.QueryRow(ctx, `SHOW server_version`).Scan(&pg))
	require.True(t, strings.HasPrefix(pg, tested["PostgreSQL"]+"."),
		"the tests run against PostgreSQL %s, testedWith says %s: update testedWith", pg, tested["PostgreSQL"])

	mq, err := amqp.Dial(ferrytest.AMQPURL())
	require.NoError(t, err)
	defer mq.Close()
	rabbit, _ := mq.Properties["version"].(string)
	require.True(t, strings.HasPrefix(rabbit, tested["RabbitMQ"]+"."),
		"the tests run against RabbitMQ %q, testedWith says %s: update testedWith", rabbit, tested["RabbitMQ"])
}
