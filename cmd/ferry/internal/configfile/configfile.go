package configfile

import (
	"fmt"
	"os"
	"regexp"
	"slices"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// EnvOf returns the environment variable a flag's usage names. Every Ferry
// setting's usage ends with a parenthesis naming it, "(FERRY_…)" or, for a
// list, "(repeatable; FERRY_…, ';'-separated)", which --help shows; the
// variable was already read into the flag's default when the flag was
// defined.
func EnvOf(f *pflag.Flag) (string, bool) {
	m := envInUsage.FindStringSubmatch(f.Usage)
	if m == nil {
		return "", false
	}
	return m[1], true
}

var envInUsage = regexp.MustCompile(`\((?:[^()]*[ ;])?(FERRY_[A-Z0-9_]+)(?:[,;][^()]*)?\)\s*$`)

// Apply reads path, a flat YAML mapping of flag names (without dashes) to
// single values:
//
//	postgres-url: postgres://ferry@db:5432/app?sslmode=verify-full
//	batch-size: 500
//	lease: 45s
//
// and sets each named flag of fs that neither the command line nor its
// environment variable set. Precedence, highest first: command line,
// environment, file, built-in default. A key outside known is an error (a
// typo must not silently fall back to a default); a key in known but not in
// fs (another command's setting, in a file shared by several commands) is
// skipped. Errors name the file, line and key, never a value: values may be
// URLs with passwords.
func Apply(fs *pflag.FlagSet, known []string, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		// yaml.v3's syntax errors give a line, not the text of a value.
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s: must be a mapping of setting names to values", path)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		where := fmt.Sprintf("config file %s:%d: %s", path, k.Line, k.Value)
		switch {
		case !slices.Contains(known, k.Value):
			return fmt.Errorf("%s: no such setting (see ferry --help)", where)
		case seen[k.Value]:
			return fmt.Errorf("%s: set twice", where)
		case v.Kind != yaml.ScalarNode:
			return fmt.Errorf("%s: must be a single value", where)
		}
		seen[k.Value] = true
		f := fs.Lookup(k.Value)
		if f == nil || f.Changed || setByEnv(f) {
			continue
		}
		if err := f.Value.Set(v.Value); err != nil {
			return fmt.Errorf("%s: not a valid %s", where, f.Value.Type())
		}
	}
	return nil
}

func setByEnv(f *pflag.Flag) bool {
	name, ok := EnvOf(f)
	if !ok {
		return false
	}
	v, ok := os.LookupEnv(name)
	return ok && v != ""
}
