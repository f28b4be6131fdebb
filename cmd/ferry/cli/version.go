package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/temporal"
)

// Set at link time where the build carries no VCS stamp: `go install
// …@version` builds from the module cache (no .git), an image is built
// from a context without .git, and this machine's GOFLAGS has
// -buildvcs=false. The Dockerfile and the Makefile pass
//
//	-ldflags "-X github.com/ferry-outbox/ferry/cmd/ferry/cli.commit=<sha> -X github.com/ferry-outbox/ferry/cmd/ferry/cli.version=<v0.x.y>"
//
// A VCS stamp, when the build has one, wins over commit; version wins over
// the module version, which a build inside the repository leaves "(devel)".
var (
	commit  string
	version string
)

// rootModule is the library's module path; the other modules' paths (and
// their release tags) are below it.
const rootModule = "github.com/ferry-outbox/ferry"

// testedWith are the servers the test suite of this tree runs against (CI,
// .ci/run): the embedded Temporal server of the dev module, and the local
// RabbitMQ and PostgreSQL. TestTestedWithIsWhatTheTestsUse checks them
// against dev/go.mod and the services the tests reach, so this is the one
// place to change when the suite moves to other versions.
var testedWith = []struct{ name, version string }{
	{"Temporal", "1.32.1"},
	{"RabbitMQ", "3.10"},
	{"PostgreSQL", "15"},
}

// build is what `ferry version` prints.
type build struct {
	Path       string // the main module, e.g. github.com/ferry-outbox/ferry/cmd/ferry
	Version    string // the module version, or "(devel)"
	Commit     string // "" when neither a VCS stamp nor -ldflags gave one
	CommitTime string // from the VCS stamp only
	Modified   bool   // the VCS stamp says the tree had uncommitted changes
	Go         string
	SDK        string // the Temporal Go SDK's version, as the SDK reports it to the server
}

func readBuild() build {
	b := build{Path: rootModule, Version: "(devel)", Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH, SDK: temporal.SDKVersion}
	info, ok := debug.ReadBuildInfo()
	if ok {
		if info.Main.Path != "" {
			b.Path = info.Main.Path
		}
		if info.Main.Version != "" {
			b.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.CommitTime = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		b.Version = version
	}
	if b.Commit == "" {
		b.Commit = commit
	}
	return b
}

// tag is the git tag of the release b.Version of module b.Path: the
// library's is the bare version, a sub-module's is prefixed with its folder
// (cmd/ferry/v0.1.0).
func (b build) tag() string {
	if b.Path == rootModule {
		return b.Version
	}
	return strings.TrimPrefix(b.Path, rootModule+"/") + "/" + b.Version
}

func (b build) print(w io.Writer) {
	fmt.Fprintf(w, "ferry %s (%s)\n", b.Version, b.Path)
	switch {
	case b.Commit != "":
		c := b.Commit
		var notes []string
		if b.CommitTime != "" {
			notes = append(notes, b.CommitTime)
		}
		if b.Modified {
			notes = append(notes, "with uncommitted changes")
		}
		if len(notes) > 0 {
			c += " (" + strings.Join(notes, ", ") + ")"
		}
		fmt.Fprintf(w, "commit:       %s\n", c)
	case strings.HasPrefix(b.Version, "v"): // a module version, not "(devel)"
		fmt.Fprintf(w, "commit:       not stamped; the release tag %s names it\n", b.tag())
	default:
		fmt.Fprintf(w, "commit:       unknown: built without a VCS stamp or -ldflags '-X %s/cmd/ferry/cli.commit=…' (make build sets it)\n", rootModule)
	}
	fmt.Fprintf(w, "go:           %s\n", b.Go)
	fmt.Fprintf(w, "temporal sdk: %s\n", b.SDK)
	servers := make([]string, len(testedWith))
	for i, s := range testedWith {
		servers[i] = s.name + " " + s.version
	}
	fmt.Fprintf(w, "tested with:  %s\n", strings.Join(servers, ", "))
}

func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit, the Go and Temporal SDK versions, and the servers the release was tested against",
		Args:  cobra.NoArgs,
		// No configuration is read: a broken config file must not hide
		// which binary this is.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		Run: func(*cobra.Command, []string) {
			readBuild().print(g.stdout)
		},
	}
}
