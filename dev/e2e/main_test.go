package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/dev/devcli"
	"github.com/ferry-outbox/ferry/dev/devserver"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/internal/publishjournal"
	"github.com/ferry-outbox/ferry/workflows"
)

// childEnv marks a re-executed test binary that runs the ferry command ("1"),
// the fault suite's checker consumer ("consumer"), a Temporal server
// ("temporal") or the orders example service ("orders") instead of tests:
// the fault tests need them in processes of their own, and this binary
// already contains them.
const childEnv = "FERRY_E2E_CHILD"

var (
	temporalAddr string
	namespace    string
	uiURL        string
	tclient      client.Client
)

// No goleak here: the embedded Temporal server runs in this process and
// keeps goroutines of its own until the process exits.
func TestMain(m *testing.M) {
	// Every process of this binary keeps the publish journal, in the
	// schemas that have its table (the checker makes it in the
	// publish-first lane); children inherit the switch.
	os.Setenv(publishjournal.EnvVar, "1")
	switch os.Getenv(childEnv) {
	case "1":
		os.Exit(devcli.Main(os.Args[1:], os.Stdout, os.Stderr))
	case "consumer":
		os.Exit(checkerConsumerMain())
	case "temporal":
		os.Exit(temporalServerMain())
	case "orders":
		os.Exit(ordersServiceMain())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devserver.Start(ctx, devserver.Config{Address: "127.0.0.1:0", UIAddress: "127.0.0.1:0", SearchAttributes: workflows.SearchAttributeTypes})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: start embedded Temporal server: %v\n", err)
		return 1
	}
	defer srv.Stop()
	temporalAddr, namespace, uiURL = srv.FrontendAddress(), srv.Namespace(), srv.UIURL()
	tclient, err = client.DialContext(ctx, client.Options{HostPort: temporalAddr, Namespace: namespace, Logger: ferrytest.QuietLogger()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: dial embedded Temporal server: %v\n", err)
		return 1
	}
	defer tclient.Close()
	return m.Run()
}
