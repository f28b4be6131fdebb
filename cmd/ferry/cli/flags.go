package cli

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/ferry-outbox/ferry/broker"
	"github.com/ferry-outbox/ferry/cmd/ferry/internal/settings"
)

// addSettingFlags defines a persistent flag for every setting of the table
// (internal/settings): its name, usage and default come from there, its
// environment variable is read into the default, and the value lands in
// the field the table names.
func addSettingFlags(f *pflag.FlagSet, g *globals) {
	for _, s := range settings.Flags() {
		dst, err := g.destination(s)
		if err != nil {
			panic(err) // the table and app.Config disagree: TestFlagsFromTheTable fails
		}
		defineFlag(f, s, dst)
	}
}

// destination is where a setting's value goes: the globals the command
// reads itself, or the field of app.Config the table names.
func (g *globals) destination(s settings.Setting) (any, error) {
	switch s.Name {
	case "log-level":
		return &g.logLevel, nil
	case "config":
		return &g.configFile, nil
	case "policy":
		return &g.policies, nil
	}
	path := s.Bind
	if path == "" && len(s.Fields) > 0 {
		path = configPath(s.Fields[0])
	}
	if path == "" {
		return nil, fmt.Errorf("setting %s: no field to bind", s.Name)
	}
	v := reflect.ValueOf(&g.cfg).Elem()
	for _, name := range strings.Split(path, ".") {
		v = v.FieldByName(name)
		if !v.IsValid() {
			return nil, fmt.Errorf("setting %s: app.Config has no %s", s.Name, path)
		}
	}
	return v.Addr().Interface(), nil
}

// configPath turns a library field ("PostgresConfig.URL") into its place in
// app.Config ("Postgres.URL").
func configPath(field string) string {
	typ, name, _ := strings.Cut(field, ".")
	switch typ {
	case "Config":
		return name // embedded
	case "PostgresConfig":
		return "Postgres." + name
	case "TemporalConfig":
		return "Temporal." + name
	case "EffectsConfig":
		return "Effects." + name
	}
	return ""
}

func defineFlag(f *pflag.FlagSet, s settings.Setting, dst any) {
	usage := s.HelpUsage()
	switch p := dst.(type) {
	case *string:
		f.StringVar(p, s.Name, env(s.Env, s.Default.(string)), usage)
	case *int:
		f.IntVar(p, s.Name, envInt(s.Env, s.Default.(int)), usage)
	case *bool:
		f.BoolVar(p, s.Name, envBool(s.Env, s.Default.(bool)), usage)
	case *time.Duration:
		f.DurationVar(p, s.Name, envDuration(s.Env, s.Default.(time.Duration)), usage)
	case *[]string:
		f.StringArrayVar(p, s.Name, envSplit(s.Env, s.Sep), usage)
	default:
		panic(fmt.Sprintf("setting %s: cannot bind a %T", s.Name, dst))
	}
	if s.Secret {
		hideSecretDefault(f.Lookup(s.Name))
	}
}

// hideSecretDefault keeps --help from printing a password or key that a
// FERRY_* variable put into a flag's default.
func hideSecretDefault(fl *pflag.Flag) {
	switch {
	case strings.Contains(fl.DefValue, "://"):
		fl.DefValue = broker.Redact(fl.DefValue)
	case fl.Value.Type() == "stringArray" && fl.DefValue != "[]":
		fl.DefValue = "[xxxxx]"
	case fl.Value.Type() == "string" && fl.DefValue != "":
		fl.DefValue = "xxxxx"
	}
}

// explain is err's text for a person at the command line: the Go fields
// that library errors name become the flags and variables that set them
// ("ferry: Config.PollInterval must be…" reads "--poll-interval
// (FERRY_POLL_INTERVAL) must be…").
func explain(err error) string {
	return fieldNames.Replace(err.Error())
}

// fieldNames replaces each field of the table by its flag; a field without
// a flag stays as it is. Longer names come first, so that
// "TemporalConfig.TLSCA" is not read as "TemporalConfig.TLS" + "CA".
var fieldNames = func() *strings.Replacer {
	type pair struct{ old, new string }
	var pairs []pair
	for _, s := range settings.All {
		for _, f := range s.Fields {
			ref := f
			if s.Name != "" {
				ref = flagRef(s)
			}
			pairs = append(pairs, pair{"ferry: " + f, ref}, pair{f, ref})
		}
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return len(b.old) - len(a.old) })
	var args []string
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	return strings.NewReplacer(args...)
}()

// flagRef is how messages name a setting: "--poll-interval
// (FERRY_POLL_INTERVAL)".
func flagRef(s settings.Setting) string {
	if s.Env == "" {
		return "--" + s.Name
	}
	return fmt.Sprintf("--%s (%s)", s.Name, s.Env)
}

func envSplit(name, sep string) []string {
	v := env(name, "")
	if v == "" {
		return nil
	}
	if sep == "" {
		sep = ","
	}
	return strings.Split(v, sep)
}

func env(name, def string) string {
	if name == "" {
		return def
	}
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	return envParsed(name, def, strconv.Atoi, "a whole number")
}

func envDuration(name string, def time.Duration) time.Duration {
	return envParsed(name, def, time.ParseDuration, "a duration such as 500ms or 30s")
}

func envBool(name string, def bool) bool {
	return envParsed(name, def, strconv.ParseBool, "true or false")
}

// envParsed reads name with parse; def when it is unset, empty or does not
// parse (then saying so on standard error: flags' defaults come from here,
// before any logger).
func envParsed[T any](name string, def T, parse func(string) (T, error), want string) T {
	v := env(name, "")
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry: %s=%q is not %s; using %v\n", name, v, want, def)
		return def
	}
	return x
}
