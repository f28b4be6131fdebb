package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// treeModule is one go.mod of the tree.
type treeModule struct {
	Dir  string // slash-separated, relative to the tree's root: "." or "cmd/ferry"
	Path string // the module path
	file *modfile.File
}

// tracked lists the files git tracks in the work tree at root (slash-separated,
// relative to root), less those deleted in the work tree. A release is
// made of what git would tag: untracked build outputs must not reach a
// module's zip.
func tracked(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("list the files git tracks in %s (a release is made of a git work tree): %w: %s", root, err, strings.TrimSpace(stderr.String()))
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); errors.Is(err, os.ErrNotExist) {
			continue
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("git tracks no file in %s", root)
	}
	return files, nil
}

// requireClean refuses a work tree whose tracked files differ from HEAD:
// the go.sum lines the release step writes hash the files as they are, and
// the tags will name what is committed.
func requireClean(root string) error {
	cmd := exec.Command("git", "status", "--porcelain", "--untracked-files=no")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git status in %s: %w", root, err)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		return fmt.Errorf("the work tree has uncommitted changes; commit or revert them first:\n%s", s)
	}
	return nil
}

// copyTree copies files (relative to src) to dst, keeping the executable
// bit and symbolic links.
func copyTree(src, dst string, files []string) error {
	for _, f := range files {
		from, to := filepath.Join(src, filepath.FromSlash(f)), filepath.Join(dst, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		fi, err := os.Lstat(from)
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(from)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
			continue
		}
		if !fi.Mode().IsRegular() {
			continue // a submodule (a directory git tracks as a commit)
		}
		if err := copyFile(from, to, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string, perm os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// discover finds every module of the tree: each tracked go.mod outside
// testdata and outside folders the go command ignores (names starting with
// "." or "_"). It parses each go.mod at root.
func discover(root string, files []string) ([]*treeModule, error) {
	var mods []*treeModule
	seen := map[string]string{}
	for _, f := range files {
		if path.Base(f) != "go.mod" || ignoredDir(path.Dir(f)) {
			continue
		}
		dir := path.Dir(f)
		raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		mf, err := modfile.Parse(f, raw, nil)
		if err != nil {
			return nil, err
		}
		if mf.Module == nil {
			return nil, fmt.Errorf("%s has no module directive", f)
		}
		p := mf.Module.Mod.Path
		if other, ok := seen[p]; ok {
			return nil, fmt.Errorf("%s and %s/go.mod both declare module %s", f, other, p)
		}
		seen[p] = dir
		mods = append(mods, &treeModule{Dir: dir, Path: p, file: mf})
	}
	if len(mods) == 0 {
		return nil, errors.New("no go.mod in the tree")
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Dir < mods[j].Dir })
	return mods, nil
}

func ignoredDir(dir string) bool {
	for _, elem := range strings.Split(dir, "/") {
		if elem == "testdata" || (elem != "." && (strings.HasPrefix(elem, ".") || strings.HasPrefix(elem, "_"))) {
			return true
		}
	}
	return false
}

// sameModules checks the Makefile's MODULES (want: space-separated dirs)
// against the go.mod files found, so that a module added to the tree is
// linted, vetted, tested and released, not only one of these.
func sameModules(mods []*treeModule, want string) error {
	var found []string
	for _, m := range mods {
		found = append(found, m.Dir)
	}
	listed := strings.Fields(want)
	for _, d := range found {
		if !slices.Contains(listed, d) {
			return fmt.Errorf("%s/go.mod is a module of the tree, but the Makefile's MODULES (%s) does not list %s: add it there", d, want, d)
		}
	}
	for _, d := range listed {
		if !slices.Contains(found, d) {
			return fmt.Errorf("the Makefile's MODULES lists %s, but git tracks no %s/go.mod", d, d)
		}
	}
	return nil
}

// releaseOrder sorts mods so that every module comes after the modules of
// the tree it requires: a module's go.sum holds the hashes of those, so
// they are zipped first. Modules of the tree that require each other
// cannot be released in one step and are refused.
func releaseOrder(mods []*treeModule) ([]*treeModule, error) {
	byPath := map[string]*treeModule{}
	for _, m := range mods {
		byPath[m.Path] = m
	}
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[*treeModule]int{}
	var order []*treeModule
	var visit func(m *treeModule, chain []string) error
	visit = func(m *treeModule, chain []string) error {
		switch state[m] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("the modules of the tree require each other (%s): their go.sum files cannot hold each other's hashes; break the cycle", strings.Join(append(chain, m.Dir), " → "))
		}
		state[m] = visiting
		for _, r := range m.file.Require {
			if dep, ok := byPath[r.Mod.Path]; ok {
				if err := visit(dep, append(chain, m.Dir)); err != nil {
					return err
				}
			}
		}
		state[m] = done
		order = append(order, m)
		return nil
	}
	for _, m := range mods {
		if err := visit(m, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}
