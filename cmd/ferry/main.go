// Command ferry runs Ferry's relay: see `ferry --help`. It links no embedded
// Temporal server: `ferry dev` is in ferry-dev (dev/cmd/ferry-dev).
package main

import (
	"os"

	"github.com/ferry-outbox/ferry/cmd/ferry/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr, nil))
}
