// Command release turns the tree into a release of all its Go modules at
// one version, and dry-runs that release.
//
// On main, every module requires the tree's other modules at a placeholder
// version with a replace directive pointing at their folder, so that each
// builds against this tree. The go command refuses `go install …@version`
// of a module with a replace directive, and an embedder's build ignores
// them, so a release is a state of the tree in which every go.mod requires
// the tree's other modules at the release version and has no replace
// directive, and every go.sum has those modules' hashes.
//
//	make release-prepare VERSION=v0.1.0
//
// does that rewrite in the work tree (which must be clean), on a release
// branch, and says what to commit and tag.
//
//	make release-check VERSION=v0.1.0
//
// dry-runs it: in a temporary copy of the tracked files, the same rewrite, each module's zip (golang.org/x/mod/zip) in a
// file-based module proxy, then, with an empty module cache and
// GOPROXY=file://<that proxy>,<the usual one>, `go install
// github.com/ferry-outbox/ferry/cmd/ferry@v0.1.0`, its `ferry version`
// and `ferry migrate`, and a new module that `go get`s the library at the
// version and runs the producer of docs/producing.md against PostgreSQL.
// -plant-replace DIR keeps a replace directive in DIR/go.mod, as a broken
// rewrite would, and the check fails.
//
// The Makefile builds this tool (bin/tools/release) before it rewrites
// anything: in a rewritten tree, module dev requires the library at a
// version no proxy has yet.
//
// The modules are found, not listed: every go.mod git tracks (outside
// testdata). -modules, the Makefile's MODULES, must name the same folders.
//
// OpenTelemetry-Go's multimod does a similar rewrite; it is not on the
// module proxy this project's machines reach, and it keeps replace
// directives, commits to a branch it creates and wants a versions.yaml of
// module sets, while here all modules are released together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

const usage = `usage:
  release prepare -version v0.x.y [-root DIR] [-modules "…"]   rewrite the work tree into the release
  release check   -version v0.x.y [-root DIR] [-modules "…"]   dry-run the release (see -h of each)`

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	root := fs.String("root", "..", "the repository's work tree")
	version := fs.String("version", "", "the release version, e.g. v0.1.0 (CHANGELOG.md needs a section for it)")
	modules := fs.String("modules", "", "the Makefile's MODULES: must name the folders of every go.mod git tracks")
	switch args[0] {
	case "prepare":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return runPrepare(*root, *version, *modules)
	case "check":
		cfg := checkConfig{}
		fs.StringVar(&cfg.Install, "install", "github.com/ferry-outbox/ferry/cmd/ferry", "the command the check installs by version")
		pg := os.Getenv("FERRY_TEST_POSTGRES_URL")
		if pg == "" {
			pg = "postgres://postgres@127.0.0.1:5432/test"
		}
		fs.StringVar(&cfg.PostgresURL, "postgres-url", pg, "PostgreSQL for the installed ferry and the embedder, in a schema the check creates and drops (FERRY_TEST_POSTGRES_URL)")
		fs.StringVar(&cfg.Plant, "plant-replace", "", "keep a replace directive in this module folder's go.mod, as a broken rewrite would: the check must fail")
		fs.BoolVar(&cfg.Keep, "keep", false, "keep the temporary folder (tree, proxy, module cache, embedder)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		abs, err := filepath.Abs(*root)
		if err != nil {
			return err
		}
		cfg.Root, cfg.Version, cfg.Modules = abs, *version, *modules
		start := time.Now()
		if err := runCheck(ctx, cfg); err != nil {
			return fmt.Errorf("release-check %s failed after %s: %w", cfg.Version, time.Since(start).Round(time.Second), err)
		}
		fmt.Printf("release-check %s: passed in %s\n", cfg.Version, time.Since(start).Round(time.Second))
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

// runPrepare rewrites the work tree at root into the release: the rewrite
// runs in a temporary copy (so that the zips it hashes hold only tracked
// files), and the go.mod and go.sum files it changed are copied back.
func runPrepare(root, version, modules string) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	if err := checkChangelog(root, version); err != nil {
		return err
	}
	if err := requireClean(root); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "ferry-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	files, err := tracked(root)
	if err != nil {
		return err
	}
	tree := filepath.Join(tmp, "tree")
	if err := copyTree(root, tree, files); err != nil {
		return err
	}
	mods, err := discover(tree, files)
	if err != nil {
		return err
	}
	if modules != "" {
		if err := sameModules(mods, modules); err != nil {
			return err
		}
	}
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	p, err := prepare(tree, mods, version, filepath.Join(tmp, "proxy"), "", say)
	if err != nil {
		return err
	}
	if err := guard(filepath.Join(tmp, "proxy"), mods, version); err != nil {
		return err
	}
	var changed, tags []string
	for _, m := range mods {
		for _, f := range p.Changed[m.Dir] {
			rel := filepath.ToSlash(filepath.Join(m.Dir, f))
			if err := copyFile(filepath.Join(tree, rel), filepath.Join(root, rel), 0o644); err != nil {
				return err
			}
			changed = append(changed, rel)
		}
		tag := version
		if m.Dir != "." {
			tag = m.Dir + "/" + version
		}
		tags = append(tags, tag)
	}
	sort.Strings(changed)
	fmt.Printf(`
The tree is release %s. Check it, then commit and tag on a release branch
(main keeps its replace directives):
  make release-check VERSION=%s
  git commit -m "release %s" -- %s
  git tag %s
`, version, version, version, strings.Join(changed, " "), strings.Join(tags, " && git tag "))
	return nil
}
