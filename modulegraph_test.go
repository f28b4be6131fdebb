package ferry_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// What an embedder must not take part in the version selection of: the
// Temporal server, the UI server and SQLite (the embedded dev server), the
// CLI's flag libraries and the benchmark's plotting library. They live in
// the modules cmd/ferry and dev.
var devOnlyModules = []string{
	"go.temporal.io/server",
	"github.com/temporalio/ui-server",
	"modernc.org/sqlite",
	"github.com/spf13/cobra",
	"github.com/spf13/pflag",
	"gonum.org/v1/plot",
}

// builtForbidden also keeps gonum.org/v1/gonum out of what is compiled: it
// is in the module graph only because grpc's go.mod requires it for grpc's
// own tests.
var builtForbidden = append([]string{"gonum.org/v1/gonum"}, devOnlyModules...)

// The library module and examples/orders, a service that embeds Ferry, built
// as its own module against the library (replace ../..): tidy, buildable,
// and with none of the dev-only modules in their module graphs or builds.
func TestLibraryModuleGraph(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to inspect the module graph")
	orders, err := filepath.Abs(filepath.Join("examples", "orders"))
	require.NoError(t, err)
	for name, dir := range map[string]string{"library": ".", "examples/orders": orders} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			goCmd := func(args ...string) string {
				t.Helper()
				cmd := exec.Command(goBin, args...)
				cmd.Dir = dir
				// Each module on its own go.mod, as an embedder builds it.
				cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				require.NoError(t, err, "go %s in %s: %s", strings.Join(args, " "), dir, stderr.String())
				return string(out)
			}
			goCmd("mod", "tidy", "-diff")
			goCmd("build", "./...")

			mods := strings.Fields(goCmd("list", "-m", "-f", "{{.Path}}", "all"))
			require.NotEmpty(t, mods)
			for _, m := range mods {
				for _, bad := range devOnlyModules {
					require.False(t, m == bad || strings.HasPrefix(m, bad+"/"),
						"module %s is in the module graph of %s: it belongs in the cmd/ferry or dev module", m, dir)
				}
			}
			built := strings.Fields(goCmd("list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}", "./..."))
			require.Contains(t, built, "github.com/ferry-outbox/ferry")
			for _, m := range built {
				for _, bad := range builtForbidden {
					require.False(t, m == bad || strings.HasPrefix(m, bad+"/"),
						"a package of %s is built for %s: it belongs in the cmd/ferry or dev module", m, dir)
				}
			}
		})
	}
}
