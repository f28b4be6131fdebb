package main

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

//go:embed testdata/embedder/main.go
var embedderMain []byte

// checkConfig is what release-check runs with.
type checkConfig struct {
	Root    string // the repository's work tree
	Version string
	Modules string // the Makefile's MODULES; "": not compared
	Install string // the command installed by version
	// PostgresURL is the database the installed ferry migrates and the
	// embedder writes to, in a schema of their own that the check drops.
	PostgresURL string
	Plant       string // a module dir that keeps a replace directive
	Keep        bool   // keep the temporary folder
	// skipGuard leaves a planted replace directive to the go command
	// (tests only: it shows what the guard's absence would let through).
	skipGuard bool
}

// checker runs one release-check and says what it does, with the time
// since it began.
type checker struct {
	cfg   checkConfig
	start time.Time
	tmp   string
	env   []string // the go commands' environment: fresh cache, the file proxy first
}

func (c *checker) say(format string, args ...any) {
	fmt.Printf("[%5s] %s\n", time.Since(c.start).Round(time.Second), fmt.Sprintf(format, args...))
}

func runCheck(ctx context.Context, cfg checkConfig) (err error) {
	c := &checker{cfg: cfg, start: time.Now()}
	if err := checkVersion(cfg.Version); err != nil {
		return err
	}
	if err := checkChangelog(cfg.Root, cfg.Version); err != nil {
		return err
	}
	c.tmp, err = os.MkdirTemp("", "ferry-release-check-")
	if err != nil {
		return err
	}
	defer func() {
		if cfg.Keep {
			c.say("kept %s", c.tmp)
			return
		}
		if rmErr := os.RemoveAll(c.tmp); rmErr != nil && err == nil {
			err = fmt.Errorf("remove the check's folder: %w", rmErr)
		}
	}()
	tree, proxyDir := filepath.Join(c.tmp, "tree"), filepath.Join(c.tmp, "proxy")

	files, err := tracked(cfg.Root)
	if err != nil {
		return err
	}
	if err := copyTree(cfg.Root, tree, files); err != nil {
		return fmt.Errorf("copy the tree: %w", err)
	}
	mods, err := discover(tree, files)
	if err != nil {
		return err
	}
	if cfg.Modules != "" {
		if err := sameModules(mods, cfg.Modules); err != nil {
			return err
		}
	}
	var dirs []string
	for _, m := range mods {
		dirs = append(dirs, m.Dir)
	}
	c.say("release-check %s: %d tracked files copied to a temporary tree; modules %s", cfg.Version, len(files), strings.Join(dirs, ", "))
	if _, err := prepare(tree, mods, cfg.Version, proxyDir, cfg.Plant, c.say); err != nil {
		return err
	}
	if cfg.skipGuard {
		c.say("not reading back the released go.mod files (test)")
	} else {
		if err := guard(proxyDir, mods, cfg.Version); err != nil {
			return err
		}
		c.say("every released go.mod is free of replace directives and requires the tree's modules at %s", cfg.Version)
	}

	usual, err := usualProxy()
	if err != nil {
		return err
	}
	proxyURL := (&url.URL{Scheme: "file", Path: filepath.ToSlash(proxyDir)}).String()
	c.env = append(os.Environ(),
		"GOMODCACHE="+filepath.Join(c.tmp, "modcache"),
		"GOFLAGS=-modcacherw", // so that the cache can be removed
		"GOPROXY="+proxyURL+","+usual,
		"GONOSUMDB="+rootPath(mods), // the tree's modules are in no checksum database yet
		"GOPRIVATE=", "GONOPROXY=",
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		"GOBIN="+filepath.Join(c.tmp, "bin"),
	)
	c.say("the tree's modules come from the file proxy, every other module from %s, into an empty module cache", usual)

	ferry, err := c.install(ctx)
	if err != nil {
		return err
	}
	schemaURL, drop, err := c.schema(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if dropErr := drop(); dropErr != nil && err == nil {
			err = dropErr
		}
	}()
	out, err := c.run(ctx, "", nil, ferry, "migrate", "--postgres-url", schemaURL)
	if err != nil {
		return fmt.Errorf("the installed ferry migrate: %w", err)
	}
	c.say("installed ferry migrate: %s", lastLine(out))
	if err := c.embed(ctx, mods, tree, schemaURL); err != nil {
		return err
	}
	// The go.sum lines the rewrite wrote are the ones go mod tidy would
	// write: for dev, this downloads the Temporal server's dependencies.
	for _, m := range mods {
		c.say("go mod tidy -diff in the released %s …", m.Dir)
		if _, err := c.goCmd(ctx, filepath.Join(tree, filepath.FromSlash(m.Dir)), "mod", "tidy", "-diff"); err != nil {
			return fmt.Errorf("the released %s is not tidy: %w", m.Dir, err)
		}
	}
	c.say("release-check %s passed", cfg.Version)
	return nil
}

// install runs `go install <cfg.Install>@version` and the installed
// binary's `ferry version`.
func (c *checker) install(ctx context.Context) (string, error) {
	target := c.cfg.Install + "@" + c.cfg.Version
	c.say("go install %s (downloads its dependencies into the empty cache) …", target)
	// -trimpath: the build cache then serves what earlier checks compiled,
	// though each check's module cache is a new folder.
	if _, err := c.goCmd(ctx, "", "install", "-trimpath", target); err != nil {
		return "", err
	}
	ferry := filepath.Join(c.tmp, "bin", filepath.Base(c.cfg.Install))
	out, err := c.run(ctx, "", nil, ferry, "version")
	if err != nil {
		return "", fmt.Errorf("the installed %s version: %w", filepath.Base(c.cfg.Install), err)
	}
	first, _, _ := strings.Cut(out, "\n")
	if !strings.Contains(first, " "+c.cfg.Version+" ") {
		return "", fmt.Errorf("the installed binary's version says %q, not %s", first, c.cfg.Version)
	}
	c.say("installed; its version says: %s", first)
	return ferry, nil
}

// schema creates a schema of its own on cfg.PostgresURL and returns a URL
// on it and the function that drops it.
func (c *checker) schema(ctx context.Context) (string, func() error, error) {
	conn, err := pgx.Connect(ctx, c.cfg.PostgresURL)
	if err != nil {
		return "", nil, fmt.Errorf("PostgreSQL at %s (set FERRY_TEST_POSTGRES_URL): %w", redactURL(c.cfg.PostgresURL), err)
	}
	defer conn.Close(context.Background())
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	name := "release_check_" + hex.EncodeToString(suffix)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create schema %s: %w", name, err)
	}
	u, err := url.Parse(c.cfg.PostgresURL)
	if err != nil {
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.cfg.PostgresURL)
		if err != nil {
			return fmt.Errorf("drop schema %s: %w", name, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", name, err)
		}
		return nil
	}
	c.say("PostgreSQL schema %s for the installed ferry and the embedder", name)
	return u.String(), drop, nil
}

// embed builds a new module that gets the library at the version and runs
// the producer of docs/producing.md against the schema. Its go.sum, which
// the go command writes from the downloaded zip, must agree with the
// hashes the release step wrote into the modules that require the library.
func (c *checker) embed(ctx context.Context, mods []*treeModule, tree, schemaURL string) error {
	dir := filepath.Join(c.tmp, "embedder")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root := rootPath(mods)
	goVersion := "1.22"
	for _, m := range mods {
		if m.Path == root && m.file.Go != nil {
			goVersion = m.file.Go.Version
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/embedder\n\ngo "+goVersion+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), embedderMain, 0o644); err != nil {
		return err
	}
	c.say("a new module example.com/embedder: go get %s@%s …", root, c.cfg.Version)
	if _, err := c.goCmd(ctx, dir, "get", root+"@"+c.cfg.Version); err != nil {
		return err
	}
	if _, err := c.goCmd(ctx, dir, "mod", "tidy"); err != nil {
		return err
	}
	if err := sameSum(dir, tree, mods, root, c.cfg.Version); err != nil {
		return err
	}
	if _, err := c.goCmd(ctx, dir, "build", "-trimpath", "-o", "embedder", "."); err != nil {
		return err
	}
	out, err := c.run(ctx, dir, []string{"FERRY_POSTGRES_URL=" + schemaURL}, filepath.Join(dir, "embedder"))
	if err != nil {
		return fmt.Errorf("the embedder: %w", err)
	}
	c.say("the embedder ran the producer: %s", lastLine(out))
	return nil
}

// sameSum compares the embedder's go.sum line for the library with the one
// the release step wrote into each module that requires it.
func sameSum(embedder, tree string, mods []*treeModule, root, version string) error {
	want := root + " " + version + " "
	line := func(file string) (string, error) {
		raw, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(l, want) {
				return l, nil
			}
		}
		return "", nil
	}
	got, err := line(filepath.Join(embedder, "go.sum"))
	if err != nil || got == "" {
		return fmt.Errorf("the embedder's go.sum has no line %q…: %v", want, err)
	}
	for _, m := range mods {
		ours, err := line(filepath.Join(tree, filepath.FromSlash(m.Dir), "go.sum"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if ours != "" && ours != got {
			return fmt.Errorf("%s/go.sum has %q, but the go command hashed the released library as %q", m.Dir, ours, got)
		}
	}
	return nil
}

// goCmd runs the go command in dir with the check's environment, saying
// every 20 seconds that it still runs.
func (c *checker) goCmd(ctx context.Context, dir string, args ...string) (string, error) {
	return c.run(ctx, dir, nil, "go", args...)
}

func (c *checker) run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string(nil), c.env...), env...)
	if c.env == nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan struct{})
	began := time.Now()
	go func() {
		t := time.NewTicker(20 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				c.say("  … %s %s still running (%s)", filepath.Base(name), args[0], time.Since(began).Round(time.Second))
			}
		}
	}()
	err := cmd.Run()
	close(done)
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	if name == "go" {
		c.say("  go %s: %s", args[0], time.Since(began).Round(100*time.Millisecond))
	}
	return out.String(), nil
}

func usualProxy() (string, error) {
	out, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOPROXY: %w", err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" || v == "off" {
		return "", fmt.Errorf("go env GOPROXY is %q: the check needs a module proxy for the dependencies", v)
	}
	return v, nil
}

// rootPath is the shortest module path of the tree: the library's, which
// the others' paths extend.
func rootPath(mods []*treeModule) string {
	p := mods[0].Path
	for _, m := range mods {
		if len(m.Path) < len(p) {
			p = m.Path
		}
	}
	return p
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

var userinfo = regexp.MustCompile(`//[^@/]*@`)

func redactURL(u string) string { return userinfo.ReplaceAllString(u, "//…@") }
