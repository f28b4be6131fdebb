// Command ferry-dev is the ferry command with `ferry dev`: an embedded
// Temporal server and UI, sandbox effect providers and a demo, for one-command
// local development. It links the Temporal server, SQLite and the UI server;
// production runs cmd/ferry, which has none of them.
package main

import (
	"os"

	"github.com/ferry-outbox/ferry/dev/devcli"
)

func main() {
	os.Exit(devcli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
