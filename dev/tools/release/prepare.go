package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// checkVersion accepts a canonical semantic version of major 0 or 1: from
// v2 on, every module path would need a /v2 suffix.
func checkVersion(v string) error {
	if v == "" {
		return fmt.Errorf("no version: give one, e.g. VERSION=v0.1.0")
	}
	if !semver.IsValid(v) || semver.Canonical(v) != v {
		return fmt.Errorf("version %q is not a canonical semantic version like v0.1.0 or v0.2.0-rc.1 (no build metadata)", v)
	}
	if m := semver.Major(v); m != "v0" && m != "v1" {
		return fmt.Errorf("version %s: a major version above v1 needs a /%s suffix on every module path first", v, m)
	}
	return nil
}

// checkChangelog requires CHANGELOG.md at root to have a section for
// version, "## v0.1.0" (what follows on the line is free).
func checkChangelog(root, version string) error {
	raw, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return fmt.Errorf("read the changelog: %w", err)
	}
	if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(version) + `\b`).Match(raw) {
		return fmt.Errorf("CHANGELOG.md has no section \"## %s\": write the release's entry first", version)
	}
	return nil
}

// hashes are a released module's go.sum hashes.
type hashes struct {
	Zip, Mod string
}

// prepared is what prepare wrote, per module dir.
type prepared struct {
	Changed map[string][]string // module dir → the files of it that changed (go.mod, go.sum)
	Hashes  map[string]hashes   // module path → its hashes
	Sizes   map[string]int64    // module path → the size of its zip
}

// prepare turns the tree at root into a release at version: in release
// order, each module's go.mod requires the tree's other modules at version
// and loses its replace directives for them, its go.sum gets their hashes,
// and its zip (golang.org/x/mod/zip), .mod and .info go into the file
// module proxy at proxyDir. A replace directive of anything else is
// refused: the go command refuses `go install …@version` of a module with
// any.
//
// plant, a module dir, keeps a replace directive in that module's go.mod,
// as a broken rewrite would: release-check's test shows that the check
// then fails.
func prepare(root string, mods []*treeModule, version, proxyDir, plant string, say func(string, ...any)) (*prepared, error) {
	order, err := releaseOrder(mods)
	if err != nil {
		return nil, err
	}
	byPath := map[string]*treeModule{}
	for _, m := range mods {
		byPath[m.Path] = m
	}
	if plant != "" {
		found := false
		for _, m := range mods {
			found = found || m.Dir == plant
		}
		if !found {
			return nil, fmt.Errorf("-plant-replace %s: no module of the tree is in %s", plant, plant)
		}
	}
	p := &prepared{Changed: map[string][]string{}, Hashes: map[string]hashes{}, Sizes: map[string]int64{}}
	for _, m := range order {
		dir := filepath.Join(root, filepath.FromSlash(m.Dir))
		direct, err := rewriteGoMod(m, byPath, version)
		if err != nil {
			return nil, err
		}
		if m.Dir == plant {
			if len(direct) == 0 {
				return nil, fmt.Errorf("-plant-replace %s: %s requires no other module of the tree, so it has nothing to replace", plant, m.Dir)
			}
			dep := byPath[direct[0]]
			rel, err := filepath.Rel(dir, filepath.Join(root, filepath.FromSlash(dep.Dir)))
			if err != nil {
				return nil, err
			}
			if err := m.file.AddReplace(dep.Path, "", filepath.ToSlash(rel), ""); err != nil {
				return nil, err
			}
			say("%s: planting `replace %s => %s` in go.mod, as a broken rewrite would leave it", m.Dir, dep.Path, filepath.ToSlash(rel))
		}
		m.file.Cleanup()
		goMod, err := m.file.Format()
		if err != nil {
			return nil, fmt.Errorf("format %s/go.mod: %w", m.Dir, err)
		}
		if changed, err := writeIfChanged(filepath.Join(dir, "go.mod"), goMod); err != nil {
			return nil, err
		} else if changed {
			p.Changed[m.Dir] = append(p.Changed[m.Dir], "go.mod")
		}
		if changed, err := writeSums(filepath.Join(dir, "go.sum"), sumLines(m, byPath, direct, version, p.Hashes)); err != nil {
			return nil, err
		} else if changed {
			p.Changed[m.Dir] = append(p.Changed[m.Dir], "go.sum")
		}
		h, size, err := writeToProxy(proxyDir, module.Version{Path: m.Path, Version: version}, dir, goMod)
		if err != nil {
			return nil, fmt.Errorf("module %s (%s): %w", m.Path, m.Dir, err)
		}
		p.Hashes[m.Path], p.Sizes[m.Path] = h, size
		what := "no module of the tree required"
		if len(direct) > 0 {
			what = "requires " + strings.Join(direct, ", ") + " at " + version + ", their replace directives dropped"
		}
		if m.Dir == plant {
			what += " but one planted"
		}
		say("%s (%s): %s; zip %s", m.Dir, m.Path, what, kb(size))
	}
	return p, nil
}

// rewriteGoMod sets every require of a module of the tree to version and
// drops the replace directives of those modules. It returns the tree's
// modules m requires, in go.mod order.
func rewriteGoMod(m *treeModule, byPath map[string]*treeModule, version string) ([]string, error) {
	var direct []string
	for _, r := range m.file.Require {
		if _, ok := byPath[r.Mod.Path]; ok {
			direct = append(direct, r.Mod.Path)
		}
	}
	for _, p := range direct {
		if err := m.file.AddRequire(p, version); err != nil {
			return nil, fmt.Errorf("%s/go.mod: require %s %s: %w", m.Dir, p, version, err)
		}
	}
	for _, r := range append([]*modfile.Replace(nil), m.file.Replace...) {
		if _, ok := byPath[r.Old.Path]; !ok {
			return nil, fmt.Errorf("%s/go.mod replaces %s with %s %s: a released module cannot keep a replace directive (`go install …@version` refuses one); remove it before the release", m.Dir, r.Old.Path, r.New.Path, r.New.Version)
		}
		if err := m.file.DropReplace(r.Old.Path, r.Old.Version); err != nil {
			return nil, err
		}
	}
	return direct, nil
}

// sumLines are the go.sum lines m needs for the tree's modules: both
// hashes of those it requires (they provide packages to it: go mod tidy
// lists every such module in go.mod), and the go.mod hash of those it
// reaches only through them (they are in its module graph).
func sumLines(m *treeModule, byPath map[string]*treeModule, direct []string, version string, h map[string]hashes) []string {
	var lines []string
	seen := map[string]bool{}
	for _, p := range direct {
		seen[p] = true
		lines = append(lines, p+" "+version+" "+h[p].Zip, p+" "+version+"/go.mod "+h[p].Mod)
	}
	var walk func(p string)
	walk = func(p string) {
		for _, r := range byPath[p].file.Require {
			if _, ok := byPath[r.Mod.Path]; ok && !seen[r.Mod.Path] {
				seen[r.Mod.Path] = true
				lines = append(lines, r.Mod.Path+" "+version+"/go.mod "+h[r.Mod.Path].Mod)
				walk(r.Mod.Path)
			}
		}
	}
	for _, p := range direct {
		walk(p)
	}
	return lines
}

// writeSums replaces the lines of the tree's modules in the go.sum at file
// with lines, sorted as the go command sorts them. With no lines and no
// file, nothing is written.
func writeSums(file string, lines []string) (bool, error) {
	old, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return false, err
	}
	if len(lines) == 0 && os.IsNotExist(err) {
		return false, nil
	}
	ours := map[string]bool{}
	for _, l := range lines {
		ours[strings.Fields(l)[0]] = true
	}
	type entry struct {
		mv   module.Version
		line string
	}
	var entries []entry
	sc := bufio.NewScanner(bytes.NewReader(old))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		if !ours[f[0]] {
			entries = append(entries, entry{module.Version{Path: f[0], Version: f[1]}, sc.Text()})
		}
	}
	for _, l := range lines {
		f := strings.Fields(l)
		entries = append(entries, entry{module.Version{Path: f[0], Version: f[1]}, l})
	}
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i].mv, entries[j].mv
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		av, af, _ := strings.Cut(a.Version, "/")
		bv, bf, _ := strings.Cut(b.Version, "/")
		if c := semver.Compare(av, bv); c != 0 {
			return c < 0
		}
		return af < bf
	})
	var buf bytes.Buffer
	for _, e := range entries {
		buf.WriteString(e.line + "\n")
	}
	return writeIfChanged(file, buf.Bytes())
}

func writeIfChanged(file string, data []byte) (bool, error) {
	old, err := os.ReadFile(file)
	if err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	return true, os.WriteFile(file, data, 0o644)
}

// writeToProxy writes mv's zip (made from dir), .mod and .info into the
// file proxy at proxyDir, in the layout of GOPROXY's protocol, and returns
// the module's go.sum hashes and the zip's size.
func writeToProxy(proxyDir string, mv module.Version, dir string, goMod []byte) (hashes, int64, error) {
	escPath, err := module.EscapePath(mv.Path)
	if err != nil {
		return hashes{}, 0, err
	}
	escVer, err := module.EscapeVersion(mv.Version)
	if err != nil {
		return hashes{}, 0, err
	}
	at := filepath.Join(proxyDir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return hashes{}, 0, err
	}
	zipFile := filepath.Join(at, escVer+".zip")
	f, err := os.Create(zipFile)
	if err != nil {
		return hashes{}, 0, err
	}
	if err := modzip.CreateFromDir(f, mv, dir); err != nil {
		f.Close()
		return hashes{}, 0, fmt.Errorf("zip: %w", err)
	}
	if err := f.Close(); err != nil {
		return hashes{}, 0, err
	}
	fi, err := os.Stat(zipFile)
	if err != nil {
		return hashes{}, 0, err
	}
	zipHash, err := dirhash.HashZip(zipFile, dirhash.Hash1)
	if err != nil {
		return hashes{}, 0, err
	}
	modHash, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(goMod)), nil
	})
	if err != nil {
		return hashes{}, 0, err
	}
	if err := os.WriteFile(filepath.Join(at, escVer+".mod"), goMod, 0o644); err != nil {
		return hashes{}, 0, err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{mv.Version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return hashes{}, 0, err
	}
	if err := os.WriteFile(filepath.Join(at, escVer+".info"), info, 0o644); err != nil {
		return hashes{}, 0, err
	}
	if err := os.WriteFile(filepath.Join(at, "list"), []byte(mv.Version+"\n"), 0o644); err != nil {
		return hashes{}, 0, err
	}
	return hashes{Zip: zipHash, Mod: modHash}, fi.Size(), nil
}

// guard reads back every module's go.mod as the proxy serves it: no
// replace directive, and every module of the tree required at version. It
// is the check's first line: the go command notices a replace directive
// only in the module it installs (in a dependency it is silently ignored).
func guard(proxyDir string, mods []*treeModule, version string) error {
	byPath := map[string]bool{}
	for _, m := range mods {
		byPath[m.Path] = true
	}
	for _, m := range mods {
		escPath, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		escVer, err := module.EscapeVersion(version)
		if err != nil {
			return err
		}
		name := path.Join(m.Dir, "go.mod")
		raw, err := os.ReadFile(filepath.Join(proxyDir, filepath.FromSlash(escPath), "@v", escVer+".mod"))
		if err != nil {
			return fmt.Errorf("%s is not in the proxy: %w", name, err)
		}
		f, err := modfile.Parse(name, raw, nil)
		if err != nil {
			return err
		}
		for _, r := range f.Replace {
			return fmt.Errorf("the released %s keeps `replace %s => %s`: a released module must not replace (go install refuses it, and an embedder's build ignores it)", name, r.Old.Path, strings.TrimSpace(r.New.Path+" "+r.New.Version))
		}
		for _, r := range f.Require {
			if byPath[r.Mod.Path] && r.Mod.Version != version {
				return fmt.Errorf("the released %s requires %s %s, not the release %s", name, r.Mod.Path, r.Mod.Version, version)
			}
		}
	}
	return nil
}

func kb(n int64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d kB", (n+512)/1024)
}
