package bench

import (
	"context"
	"fmt"
)

// Commit-rate variants.
const (
	commitBusiness = "business row only"
	commitOutbox   = "+ outbox insert (NOTIFY trigger on, as shipped)"
	commitNoNotify = "+ outbox insert, NOTIFY trigger disabled"
	commitPlainRow = "+ a plain second row (reference: any insert)"
)

// commitVariants are the commit workload's transactions, in the first
// rep's order.
var commitVariants = []string{commitBusiness, commitOutbox, commitNoNotify, commitPlainRow}

// commitRates measures the producer's commit rate in four variants, each
// rep in a rotated order, with no relay running.
func (r *runner) commitRates(ctx context.Context) (*CommitSummary, error) {
	variants := commitVariants
	samples := map[string][]float64{}
	for rep := 1; rep <= r.cfg.Reps; rep++ {
		for i := range variants {
			v := variants[(i+rep-1)%len(variants)]
			r.progress.step("commit · rep %d/%d: %d clients, %s, for %s", rep, r.cfg.Reps, r.cfg.Clients, v, r.cfg.CommitDuration)
			if err := r.truncate(ctx); err != nil {
				return nil, err
			}
			if v == commitNoNotify {
				if _, err := r.pool.Exec(ctx, "ALTER TABLE outbox_events DISABLE TRIGGER outbox_events_notify"); err != nil {
					return nil, fmt.Errorf("disable the NOTIFY trigger: %w", err)
				}
			}
			r.seq++
			extra := extraOutbox
			switch v {
			case commitBusiness:
				extra = extraNone
			case commitPlainRow:
				extra = extraPlainRow
			}
			rate, err := r.prod.commitRate(ctx, r.cfg.CommitDuration, fmt.Sprintf("r%d_commit", r.seq), extra)
			if v == commitNoNotify {
				if _, err := r.pool.Exec(context.WithoutCancel(ctx), "ALTER TABLE outbox_events ENABLE TRIGGER outbox_events_notify"); err != nil {
					return nil, fmt.Errorf("enable the NOTIFY trigger again: %w", err)
				}
			}
			if err != nil {
				return nil, err
			}
			samples[v] = append(samples[v], rate)
			r.progress.done("%s commits/s", count(int(rate)))
		}
	}
	if err := r.truncate(ctx); err != nil {
		return nil, err
	}
	c := &CommitSummary{Clients: r.cfg.Clients, Seconds: r.cfg.CommitDuration.Seconds(),
		BusinessOnly: Median(samples[commitBusiness]), WithOutbox: Median(samples[commitOutbox]),
		WithOutboxNoNotify: Median(samples[commitNoNotify]), WithPlainRow: Median(samples[commitPlainRow]),
		Samples: map[string][]float64{"business_only": samples[commitBusiness], "with_outbox": samples[commitOutbox],
			"with_outbox_no_notify": samples[commitNoNotify], "with_plain_row": samples[commitPlainRow]}}
	c.OutboxCost = 1 - c.WithOutbox/c.BusinessOnly
	c.OutboxCostNoNotify = 1 - c.WithOutboxNoNotify/c.BusinessOnly
	c.PlainRowCost = 1 - c.WithPlainRow/c.BusinessOnly
	return c, nil
}
