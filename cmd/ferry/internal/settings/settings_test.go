package settings_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/cmd/ferry/internal/settings"
)

// The committed reference is what the table generates.
func TestReferenceIsCurrent(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../../docs/configuration.md")
	require.NoError(t, err)
	want, err := settings.Splice(string(raw))
	require.NoError(t, err)
	require.Equal(t, want, string(raw), "docs/configuration.md drifted from cmd/ferry/internal/settings: run cd cmd/ferry && go generate ./internal/settings")
}

// libraryConfigs are the public config types and the value WithDefaults
// makes of their zero value.
func libraryConfigs(t *testing.T) map[string]reflect.Value {
	t.Helper()
	c, err := ferry.Config{}.WithDefaults()
	require.NoError(t, err)
	p, err := ferry.PostgresConfig{}.WithDefaults()
	require.NoError(t, err)
	tc, err := ferry.TemporalConfig{}.WithDefaults()
	require.NoError(t, err)
	return map[string]reflect.Value{
		"Config": reflect.ValueOf(c), "EffectsConfig": reflect.ValueOf(c.Effects),
		"PostgresConfig": reflect.ValueOf(p), "TemporalConfig": reflect.ValueOf(tc),
	}
}

// Every field of a public config is a row of the table, and every row's
// field exists.
func TestEveryFieldIsInTheTable(t *testing.T) {
	t.Parallel()
	for typ, v := range libraryConfigs(t) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Name == "Effects" && typ == "Config" {
				continue // its own type's fields are rows
			}
			if !f.IsExported() {
				continue // no setting: what WithDefaults made of the others
			}
			_, ok := settings.ByField(typ + "." + f.Name)
			require.True(t, ok, "%s.%s is in no row of cmd/ferry/internal/settings", typ, f.Name)
		}
	}
	configs := libraryConfigs(t)
	for _, s := range settings.All {
		for _, field := range s.Fields {
			typ, name, _ := strings.Cut(field, ".")
			v, ok := configs[typ]
			if !ok {
				require.True(t, strings.HasPrefix(field, "workflows."), "row %q: unknown type in %s", s.Name, field)
				continue
			}
			_, ok = v.Type().FieldByName(name)
			require.True(t, ok, "row %q names %s, which does not exist", s.Name, field)
		}
	}
}

// WithDefaults fills each field with the table's default.
func TestDefaultsAreTheTables(t *testing.T) {
	t.Parallel()
	configs := libraryConfigs(t)
	for _, s := range settings.All {
		for _, field := range s.Fields {
			typ, name, _ := strings.Cut(field, ".")
			v, ok := configs[typ]
			if !ok || field == "Config.Policies" {
				continue
			}
			got := v.FieldByName(name).Interface()
			if def, ok := s.Default.([]string); ok {
				require.Equal(t, def, got, field)
				continue
			}
			require.Equal(t, s.Default, got, "%s: WithDefaults fills %v, the table says %v", field, got, s.Default)
		}
	}
}

// Each field's doc comment states the table's default.
func TestDocCommentsStateTheDefault(t *testing.T) {
	t.Parallel()
	comments := fieldComments(t, "../../../..")
	for _, s := range settings.All {
		for _, field := range s.Fields {
			if strings.HasPrefix(field, "workflows.") {
				continue
			}
			doc, ok := comments[field]
			require.True(t, ok, "%s has no doc comment", field)
			doc = strings.Join(strings.Fields(doc), " ")
			require.Contains(t, doc, "Default", "%s: the comment states no default", field)
			require.Contains(t, doc, s.DefaultString(), "%s: the comment does not state the table's default", field)
		}
	}
}

// fieldComments are the doc comments of the struct fields of the root
// package, by "Type.Field".
func fieldComments(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, fl := range st.Fields.List {
				for _, name := range fl.Names {
					out[ts.Name.Name+"."+name.Name] = fl.Doc.Text()
				}
			}
			return false
		})
	}
	return out
}

// A flag's default is one of the kinds the CLI binds, and names are unique.
func TestRowsAreWellFormed(t *testing.T) {
	t.Parallel()
	names, envs := map[string]bool{}, map[string]bool{}
	for _, s := range settings.All {
		switch s.Default.(type) {
		case string, int, bool, time.Duration, []string:
		default:
			t.Errorf("row %q: default of type %T", s.Name, s.Default)
		}
		require.NotEmpty(t, s.Usage, s.Name)
		require.Contains(t, settings.Owners, s.Owner, s.Name)
		if s.Name == "" {
			require.NotEmpty(t, s.Fields, "a library-only row names its field")
			continue
		}
		require.False(t, names[s.Name], "flag %s twice", s.Name)
		names[s.Name] = true
		if s.Env != "" {
			require.False(t, envs[s.Env], "variable %s twice", s.Env)
			envs[s.Env] = true
		}
		require.Equal(t, s.Repeatable, s.Sep != "", "%s: a repeatable flag has a separator, and only it", s.Name)
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{time.Second: "1s", time.Minute: "1m", 720 * time.Hour: "720h", 90 * time.Minute: "1h30m", 10 * time.Millisecond: "10ms"} {
		require.Equal(t, want, settings.FormatDuration(d))
	}
}
