// Command gen writes the settings reference (internal/settings) into
// docs/configuration.md between its markers: cd cmd/ferry && go generate ./internal/settings.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ferry-outbox/ferry/cmd/ferry/internal/settings"
)

func main() {
	out := flag.String("o", "docs/configuration.md", "page to update")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc, err := settings.Splice(string(raw))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
