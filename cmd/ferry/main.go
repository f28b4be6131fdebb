// Command ferry runs Ferry's relay: see `ferry --help`.
package main

import (
	"os"

	"github.com/ferry-outbox/ferry/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
