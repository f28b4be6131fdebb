package main

import (
	"os"

	"github.com/ferry-outbox/ferry/dev/bench"
)

func main() {
	if os.Getenv(bench.RoleEnv) == bench.RoleRelay {
		os.Exit(bench.RelayMain())
	}
	os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr))
}
