package cli

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/ferry-outbox/ferry/internal/app"
	"github.com/ferry-outbox/ferry/sandbox/payprovider"
	"github.com/ferry-outbox/ferry/sandbox/smtpsink"
)

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
