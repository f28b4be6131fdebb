package devcli

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ferry-outbox/ferry/cmd/ferry/app"
	"github.com/ferry-outbox/ferry/cmd/ferry/cli"
	"github.com/ferry-outbox/ferry/dev/demo"
	"github.com/ferry-outbox/ferry/dev/devserver"
	"github.com/ferry-outbox/ferry/examples/inventory"
	"github.com/ferry-outbox/ferry/internal/sandbox/payprovider"
	"github.com/ferry-outbox/ferry/internal/sandbox/smtpsink"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/workflows"
)

// Main runs the ferry command, `ferry dev` included, with args (without the
// program name) and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return cli.Main(args, stdout, stderr, dev{})
}

// dev is cli.Dev with the embedded server, the sandboxes and the demo.
type dev struct{}

func (dev) StartServer(ctx context.Context, c cli.DevServerConfig) (cli.DevServer, error) {
	var pg *devserver.Postgres
	if c.Postgres != nil {
		pg = &devserver.Postgres{URL: c.Postgres.URL, Database: c.Postgres.Database,
			VisibilityDatabase: c.Postgres.VisibilityDatabase, HistoryShards: c.Postgres.HistoryShards}
	}
	return devserver.Start(ctx, devserver.Config{
		CodecEndpoint:  c.CodecEndpoint,
		DatabasePath:   c.DatabasePath,
		Address:        c.Address,
		UIAddress:      c.UIAddress,
		Namespace:      c.Namespace,
		LogFile:        c.LogFile,
		Postgres:       pg,
		Services:       c.Services,
		InternalPorts:  c.InternalPorts,
		Progress:       c.Progress,
		MetricsAddress: c.MetricsAddress,
		// The dead-letter view: Ferry's search attributes.
		SearchAttributes: workflows.SearchAttributeTypes,
	})
}

func (dev) StartSandboxes(ctx context.Context, cfg *app.Config, faultRate float64, out io.Writer) (stop func(), err error) {
	return startSandboxes(ctx, cfg, faultRate, out)
}

func (dev) RunDemo(ctx context.Context, d cli.Demo) {
	cfg, out := d.Config, d.Out
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	pool, err := cfg.OpenPool(cctx)
	if err != nil {
		fmt.Fprintf(out, "ferry dev: demo producer off: %v\n", err)
		return
	}
	writer, _ := outbox.NewWriter(outbox.Config{})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(2)
	go func() {
		defer wg.Done()
		// Every 5th applied message is sent again, so the
		// deduplication shows.
		red, _ := cfg.Redactor() // validated by WithDefaults
		err := inventory.Run(ctx, inventory.Config{PostgresURL: cfg.Postgres.URL, AMQPURL: cfg.AMQPURL,
			Exchange: cfg.Exchange, Out: out, ResendEvery: 5, Logger: d.Logger, Metrics: d.Metrics, Redact: red})
		if err != nil {
			fmt.Fprintf(out, "ferry dev: example consumer stopped: %v\n", err)
		}
	}()
	go func() {
		defer wg.Done()
		defer pool.Close()
		if err := (&demo.Producer{Pool: pool, Writer: writer, Out: out, Every: d.Every}).Run(ctx); err != nil {
			fmt.Fprintf(out, "ferry dev: demo producer stopped: %v\n", err)
		}
	}()
}

// devRoutes are `ferry dev`'s effects when none are configured.
var devRoutes = []string{"order.created=charge,email:confirmation", "order.cancelled=refund"}

// startSandboxes runs the sandbox payment provider and SMTP sink for
// `ferry dev`, with a few faults (faultRate of first requests) so
// reconciliation shows, and points cfg's effects at them.
func startSandboxes(ctx context.Context, cfg *app.Config, faultRate float64, out io.Writer) (stop func(), err error) {
	faults := []payprovider.Fault{payprovider.FaultSlowAfterCommit, payprovider.FaultErrorAfterCommit, payprovider.FaultDropAfterCommit, payprovider.FaultRateLimit}
	pay, err := payprovider.New(payprovider.Config{
		SlowDelay: cfg.Effects.PaymentsTimeout + 2*time.Second,
		Faults: func(r payprovider.Request) payprovider.Fault {
			if r.Method == "POST" && r.Seen == 0 && rand.Float64() < faultRate {
				return faults[rand.IntN(len(faults))]
			}
			return payprovider.FaultNone
		},
	})
	if err != nil {
		return nil, err
	}
	if err := pay.Start(ctx); err != nil {
		return nil, err
	}
	sink, err := smtpsink.New(smtpsink.Config{Faults: func(a smtpsink.Attempt) smtpsink.Fault {
		if a.Seen == 0 && rand.Float64() < faultRate {
			return smtpsink.FaultDropAfterData
		}
		return smtpsink.FaultNone
	}})
	if err != nil {
		pay.Stop()
		return nil, err
	}
	if err := sink.Start(ctx); err != nil {
		pay.Stop()
		return nil, err
	}
	if len(cfg.Effects.Routes) == 0 {
		cfg.Effects.Routes = devRoutes
	}
	if cfg.Effects.PaymentsURL == "" {
		cfg.Effects.PaymentsURL = pay.URL()
	}
	if cfg.Effects.SMTPAddress == "" {
		cfg.Effects.SMTPAddress = sink.Addr()
	}
	fmt.Fprintf(out, "ferry dev: sandbox payment provider on %s (ledger: %s/v1/ledger), SMTP sink on %s; %.0f%% of first requests meet a fault\n",
		pay.URL(), pay.URL(), sink.Addr(), faultRate*100)
	return func() { sink.Stop(); pay.Stop() }, nil
}
