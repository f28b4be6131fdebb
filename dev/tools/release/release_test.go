package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fixture is a small tree of three modules as this repository has them on
// main: cmd/tool and dev require the library at a placeholder version and
// replace it (and each other) with their folders. None has a dependency
// outside the tree, so the go commands below run without a network.
var fixture = map[string]string{
	"CHANGELOG.md": "# Changelog\n\n## v0.2.0\n\nA release.\n",
	"go.mod":       "module example.com/lib\n\ngo 1.22\n",
	"lib.go":       "package lib\n\n// Hello is the library.\nfunc Hello() string { return \"hello\" }\n",
	"cmd/tool/go.mod": `module example.com/lib/cmd/tool

go 1.22

require example.com/lib v0.0.0-00010101000000-000000000000

// The library is the repository root.
replace example.com/lib => ../..
`,
	"cmd/tool/main.go":        "package main\n\nimport \"example.com/lib/cmd/tool/greet\"\n\nfunc main() { println(greet.Greet()) }\n",
	"cmd/tool/greet/greet.go": "package greet\n\nimport \"example.com/lib\"\n\n// Greet greets.\nfunc Greet() string { return lib.Hello() }\n",
	"dev/go.mod": `module example.com/lib/dev

go 1.22

require (
	example.com/lib v0.0.0-00010101000000-000000000000
	example.com/lib/cmd/tool v0.0.0-00010101000000-000000000000
)

replace (
	example.com/lib => ../
	example.com/lib/cmd/tool => ../cmd/tool
)
`,
	"dev/dev.go":               "package dev\n\nimport (\n\t\"example.com/lib\"\n\t\"example.com/lib/cmd/tool/greet\"\n)\n\nvar _, _ = lib.Hello, greet.Greet\n",
	"dev/testdata/x/go.mod":    "module example.com/ignored\n",
	"untracked-is-not-shipped": "",
}

// gitTree writes files into a new git work tree and adds all but the
// untracked one.
func gitTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	git("init", "-q")
	for name := range files {
		if name != "untracked-is-not-shipped" {
			git("add", name)
		}
	}
	return root
}

// prepared copies the fixture's tracked files and runs prepare on the copy.
func prepareFixture(t *testing.T, plant string) (tree, proxyDir string, mods []*treeModule) {
	t.Helper()
	root := gitTree(t, fixture)
	files, err := tracked(root)
	require.NoError(t, err)
	require.NotContains(t, files, "untracked-is-not-shipped")
	tree, proxyDir = filepath.Join(t.TempDir(), "tree"), filepath.Join(t.TempDir(), "proxy")
	require.NoError(t, copyTree(root, tree, files))
	mods, err = discover(tree, files)
	require.NoError(t, err)
	_, err = prepare(tree, mods, "v0.2.0", proxyDir, plant, t.Logf)
	require.NoError(t, err)
	return tree, proxyDir, mods
}

// offlineGo runs the go command with an empty module cache and the file
// proxy as the only proxy.
func offlineGo(t *testing.T, dir, proxyDir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GOMODCACHE="+filepath.Join(t.TempDir(), "modcache"), "GOFLAGS=-modcacherw",
		"GOPROXY="+(&url.URL{Scheme: "file", Path: filepath.ToSlash(proxyDir)}).String(),
		"GONOSUMDB=example.com", "GOPRIVATE=", "GONOPROXY=", "GOWORK=off", "GOTOOLCHAIN=local",
		"GOBIN="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// The release step on a tree like this one: the modules are found (not
// the one under testdata), each go.mod requires the others at the version
// without a replace directive, each go.sum has their hashes, and the go
// command, from the file proxy alone, installs the tool by version, finds
// the go.sum files tidy and builds dev.
func TestPrepareMakesAReleaseTheGoCommandInstalls(t *testing.T) {
	t.Parallel()
	tree, proxyDir, mods := prepareFixture(t, "")
	var dirs []string
	for _, m := range mods {
		dirs = append(dirs, m.Dir)
	}
	require.Equal(t, []string{".", "cmd/tool", "dev"}, dirs)

	goMod, err := os.ReadFile(filepath.Join(tree, "cmd/tool/go.mod"))
	require.NoError(t, err)
	require.Equal(t, "module example.com/lib/cmd/tool\n\ngo 1.22\n\nrequire example.com/lib v0.2.0\n", string(goMod))
	devMod, err := os.ReadFile(filepath.Join(tree, "dev/go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(devMod), "\texample.com/lib v0.2.0\n\texample.com/lib/cmd/tool v0.2.0\n")
	require.NotContains(t, string(devMod), "replace")
	require.NoError(t, guard(proxyDir, mods, "v0.2.0"))

	sums, err := os.ReadFile(filepath.Join(tree, "dev/go.sum"))
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^example.com/lib v0.2.0 h1:\S+=\nexample.com/lib v0.2.0/go.mod h1:\S+=\n`+
		`example.com/lib/cmd/tool v0.2.0 h1:\S+=\nexample.com/lib/cmd/tool v0.2.0/go.mod h1:\S+=\n$`), string(sums))

	out, err := offlineGo(t, t.TempDir(), proxyDir, "install", "example.com/lib/cmd/tool@v0.2.0")
	require.NoError(t, err, out)
	for _, dir := range []string{"cmd/tool", "dev"} {
		out, err := offlineGo(t, filepath.Join(tree, dir), proxyDir, "mod", "tidy", "-diff")
		require.NoError(t, err, "the released %s is not tidy:\n%s", dir, out)
	}
	out, err = offlineGo(t, filepath.Join(tree, "dev"), proxyDir, "build", "-mod=readonly", "./...")
	require.NoError(t, err, "build the released dev from the proxy, with its go.sum checked:\n%s", out)
}

// A replace directive left in a released go.mod: the guard names the file
// and the directive; without the guard, `go install …@version` refuses
// the module (what an embedder of the tool would meet).
func TestPlantedReplaceFails(t *testing.T) {
	t.Parallel()
	_, proxyDir, mods := prepareFixture(t, "cmd/tool")
	err := guard(proxyDir, mods, "v0.2.0")
	require.ErrorContains(t, err, "the released cmd/tool/go.mod keeps `replace example.com/lib => ../..`")

	out, err := offlineGo(t, t.TempDir(), proxyDir, "install", "example.com/lib/cmd/tool@v0.2.0")
	require.Error(t, err)
	require.Contains(t, strings.Join(strings.Fields(out), " "), "The go.mod file for the module providing named packages contains one or more replace directives", out)
}

// release-check on this repository fails, before any download, when one of
// its modules keeps a replace directive. Each module that requires another
// is tried.
func TestCheckOfThisTreeFailsOnAPlantedReplace(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	files, err := tracked(root)
	require.NoError(t, err)
	mods, err := discover(root, files)
	require.NoError(t, err)
	version := changelogVersion(t, root)
	planted := 0
	for _, m := range mods {
		if m.Path == rootPath(mods) {
			continue
		}
		t.Run(m.Dir, func(t *testing.T) {
			err := runCheck(context.Background(), checkConfig{Root: root, Version: version, Install: "github.com/ferry-outbox/ferry/cmd/ferry", Plant: m.Dir})
			require.Error(t, err)
			require.Regexp(t, "the released "+regexp.QuoteMeta(m.Dir)+"/go.mod keeps `replace github.com/ferry-outbox/ferry[^ ]* => ", err.Error())
		})
		planted++
	}
	require.GreaterOrEqual(t, planted, 3, "cmd/ferry, examples/orders and dev require the library")
}

// changelogVersion is the newest version CHANGELOG.md has a section for.
func changelogVersion(t *testing.T, root string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^## (v\S+)`).FindSubmatch(raw)
	require.NotNil(t, m, "CHANGELOG.md has no version section")
	return string(m[1])
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ version, want string }{
		{"", "no version"},
		{"0.1.0", "not a canonical semantic version"},
		{"v0.1", "not a canonical semantic version"},
		{"v0.1.0+build", "not a canonical semantic version"},
		{"v2.0.0", "needs a /v2 suffix"},
	} {
		require.ErrorContains(t, checkVersion(tt.version), tt.want, tt.version)
	}
	require.NoError(t, checkVersion("v0.2.0-rc.1"))

	root := gitTree(t, fixture)
	require.ErrorContains(t, checkChangelog(root, "v0.3.0"), `CHANGELOG.md has no section "## v0.3.0"`)
	require.NoError(t, checkChangelog(root, "v0.2.0"))

	files, err := tracked(root)
	require.NoError(t, err)
	mods, err := discover(root, files)
	require.NoError(t, err)
	require.ErrorContains(t, sameModules(mods, ". cmd/tool"), "dev/go.mod is a module of the tree, but the Makefile's MODULES (. cmd/tool) does not list dev")
	require.ErrorContains(t, sameModules(mods, ". cmd/tool dev other"), "lists other, but git tracks no other/go.mod")
	require.NoError(t, sameModules(mods, "dev . cmd/tool"))

	// A replace of a module outside the tree cannot be released.
	foreign := map[string]string{}
	for k, v := range fixture {
		foreign[k] = v
	}
	foreign["cmd/tool/go.mod"] += "replace example.org/other => ../other\n"
	root = gitTree(t, foreign)
	files, err = tracked(root)
	require.NoError(t, err)
	mods, err = discover(root, files)
	require.NoError(t, err)
	_, err = prepare(root, mods, "v0.2.0", t.TempDir(), "", t.Logf)
	require.ErrorContains(t, err, "cmd/tool/go.mod replaces example.org/other with ../other")

	// Modules that require each other cannot hold each other's hashes.
	cycle := map[string]string{}
	for k, v := range fixture {
		cycle[k] = v
	}
	cycle["go.mod"] = "module example.com/lib\n\ngo 1.22\n\nrequire example.com/lib/dev v0.0.0-00010101000000-000000000000\n"
	root = gitTree(t, cycle)
	files, err = tracked(root)
	require.NoError(t, err)
	mods, err = discover(root, files)
	require.NoError(t, err)
	_, err = releaseOrder(mods)
	require.ErrorContains(t, err, "require each other")
	require.True(t, strings.Contains(err.Error(), ". → dev → .") || strings.Contains(err.Error(), "dev → . → dev"), err.Error())
}
