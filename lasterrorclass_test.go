package ferry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// setsLastError matches an assignment to last_error in SQL (SET last_error
// = …), not to last_error_class and not a comparison such as
// "last_error LIKE".
var setsLastError = regexp.MustCompile(`\blast_error\s*=`)

// setsLastErrorClass matches an assignment to last_error_class.
var setsLastErrorClass = regexp.MustCompile(`\blast_error_class\s*=`)

// lastErrorWritesWithoutClass lists the string literals of the Go file src
// that assign last_error without assigning last_error_class, as
// "file:line: literal".
func lastErrorWritesWithoutClass(t *testing.T, path string, src []byte) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	require.NoError(t, err, path)
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		if setsLastError.MatchString(s) && !setsLastErrorClass.MatchString(s) {
			found = append(found, fset.Position(lit.Pos()).String()+": "+strings.Join(strings.Fields(s), " "))
		}
		return true
	})
	return found
}

// Every statement in Ferry's Go code that writes outbox_events.last_error
// writes last_error_class in the same SET (migration 0011): a class left
// from an earlier error beside a new message, or beside none, would tell
// `ferry event` and `ferry blocked` a wrong story.
func TestEveryLastErrorWriteSetsItsClass(t *testing.T) {
	t.Parallel()
	var found []string
	seen := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if setsLastError.Match(b) {
			seen++
		}
		found = append(found, lastErrorWritesWithoutClass(t, path, b)...)
		return nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, seen, 3, "the walk must see the files that write last_error (outbox, poller)")
	slices.Sort(found)
	require.Empty(t, found, "a statement writes last_error without last_error_class: set both (NULL when the error has no class)")
}

// The check must catch what it is for.
func TestLastErrorWriteCheckMatches(t *testing.T) {
	t.Parallel()
	src := []byte("package p\n" +
		"const a = `UPDATE outbox_events SET last_error = $2 WHERE id = $1`\n" +
		"const b = `UPDATE outbox_events SET last_error = NULL, last_error_class = NULL WHERE id = $1`\n" +
		"const c = `SELECT 1 FROM outbox_events WHERE last_error LIKE 'held: %'`\n" +
		"const d = \"UPDATE outbox_events SET status = 'x', last_error=$3\"\n")
	found := lastErrorWritesWithoutClass(t, "p.go", src)
	require.Len(t, found, 2, "%q", found)
	require.Contains(t, found[0], "p.go:2:")
	require.Contains(t, found[1], "p.go:5:")
}
