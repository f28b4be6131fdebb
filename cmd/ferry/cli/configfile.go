package cli

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferry-outbox/ferry/cmd/ferry/internal/configfile"
)

// addConfigFileFlag adds --config and applies the file before any command
// runs; see package configfile for the format and the precedence.
func addConfigFileFlag(root *cobra.Command, g *globals) {
	root.PersistentFlags().StringVar(&g.configFile, "config", env("FERRY_CONFIG", ""),
		"YAML file of settings keyed by flag name; flags and FERRY_* variables override it (FERRY_CONFIG)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if g.configFile == "" {
			return nil
		}
		return configfile.Apply(cmd.Flags(), settingNames(cmd.Root()), g.configFile)
	}
}

// settingNames lists every flag of every command, less --config and --help.
func settingNames(c *cobra.Command) []string {
	var names []string
	add := func(f *pflag.Flag) {
		if f.Name != "config" && f.Name != "help" {
			names = append(names, f.Name)
		}
	}
	c.PersistentFlags().VisitAll(add)
	c.LocalNonPersistentFlags().VisitAll(add)
	for _, sub := range c.Commands() {
		names = append(names, settingNames(sub)...)
	}
	return names
}
