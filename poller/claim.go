package poller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/serviceerror"

	"github.com/ferry-outbox/ferry/internal/failpoint"
	"github.com/ferry-outbox/ferry/internal/pgtext"
	"github.com/ferry-outbox/ferry/workflows"
)

// Claimed is one claimed outbox row.
type claimed struct {
	id, aggType, aggID, eventType string
	version                       int64
	attempts                      int    // claims so far, this one included
	traceParent, traceState       string // W3C, stored by the producer; may be empty
}

// sqlClaim takes the oldest claimable pending rows ($1 of them), plus up to
// $4 more claimable rows of the same aggregates, so that one signal carries
// an aggregate's whole backlog instead of one event per claim: a burst
// interleaved over many aggregates costs a signal per aggregate, not per
// event. SKIP LOCKED lets pollers claim disjoint rows at once (rows of one
// aggregate may then go to two pollers; the workflow orders them); the
// lease (next_attempt_at moved forward) keeps them invisible after this
// statement's locks are gone; attempts counts the claim itself, so a row
// that crashes its relay still counts. The extension reads the unique
// (aggregate, version) index from the delivered version up, never the
// aggregate's delivered history.
const sqlClaim = `
WITH picked AS (
    SELECT id, aggregate_type, aggregate_id FROM outbox_events
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), more AS (
    SELECT e.id FROM (SELECT DISTINCT aggregate_type, aggregate_id FROM picked) p
    JOIN outbox_aggregates a ON a.aggregate_type = p.aggregate_type AND a.aggregate_id = p.aggregate_id
    JOIN outbox_events e ON e.aggregate_type = p.aggregate_type AND e.aggregate_id = p.aggregate_id
        AND e.aggregate_version > a.delivered_version
    WHERE e.status = 'pending' AND e.next_attempt_at <= now()
      AND e.id NOT IN (SELECT id FROM picked)
    ORDER BY e.next_attempt_at
    LIMIT $4
    FOR UPDATE OF e SKIP LOCKED
)
UPDATE outbox_events e
SET attempts = e.attempts + 1, next_attempt_at = now() + $2::interval, claimed_by = $3
WHERE e.id IN (SELECT id FROM picked UNION ALL SELECT id FROM more)
RETURNING e.id::text, e.aggregate_type, e.aggregate_id, e.aggregate_version, e.event_type,
    coalesce(e.trace_parent, ''), coalesce(e.trace_state, ''), e.attempts`

// claimExtension: a claim takes up to this many times BatchSize later rows
// of the aggregates its BatchSize oldest rows belong to.
const claimExtension = 4

// sqlMarkDispatched: only after Temporal accepted the signal. A row the
// workflow already published stays published, and one a blocked workflow
// handed back before the signal returned (workflows.HeldPrefix) stays
// pending, or nothing would claim it again.
const sqlMarkDispatched = `
UPDATE outbox_events SET status = 'dispatched', dispatched_at = now(), last_error = NULL, last_error_class = NULL
WHERE id = ANY($1::uuid[]) AND status = 'pending' AND coalesce(last_error, '') NOT LIKE '` + workflows.HeldPrefix + `%'`

// sqlRelease gives rows whose signal failed back, after an exponential
// backoff by attempts (1s, 2s, 4s… capped), with the failure and its class
// ($4: ErrClassTemporalRefused, or empty for an outage, which has none).
const sqlRelease = `
UPDATE outbox_events
SET next_attempt_at = now() + LEAST(make_interval(secs => power(2, LEAST(attempts - 1, 20))), $2::interval),
    last_error = $3, last_error_class = nullif($4, '')
WHERE id = ANY($1::uuid[]) AND status = 'pending'`

// sqlQuarantineRefused takes rows out of the claim for good: Temporal
// refused their start or signal as invalid MaxRefusedAttempts times. No
// workflow holds them; `ferry repair` skips or re-queues them.
const sqlQuarantineRefused = `
UPDATE outbox_events SET status = 'quarantined', last_error = $2, last_error_class = '` + ErrClassTemporalRefused + `'
WHERE id = ANY($1::uuid[]) AND status = 'pending'
RETURNING event_type`

// ErrClassTemporalRefused is the error class of a row quarantined because
// Temporal refused its start or signal as invalid (Config.MaxRefusedAttempts).
const ErrClassTemporalRefused = "TemporalRefused"

// refused says whether Temporal refused a request as invalid: it fails the
// same way however often it is sent. Unavailable, DeadlineExceeded,
// ResourceExhausted and the like are outages and stay retryable.
func refused(err error) bool {
	var invalid *serviceerror.InvalidArgument
	return errors.As(err, &invalid)
}

// RunOnce claims one batch, signals its aggregates and marks what Temporal
// accepted (in the publish-first lane: one round of the lane, lane.go).
// It returns the number of rows claimed. Aggregates whose signal failed
// keep their rows pending with a backoff; the error says so only when
// every aggregate failed (Temporal takes nothing), and the loop then
// backs off.
func (p *Poller) RunOnce(ctx context.Context) (int, error) {
	if p.cfg.Lane == LanePublishFirst {
		n, _, err := p.laneRound(ctx, nil)
		return n, err
	}
	return p.runWorkflowOnce(ctx)
}

func (p *Poller) runWorkflowOnce(ctx context.Context) (int, error) {
	start := time.Now()
	rows, err := p.cfg.Pool.Query(ctx, sqlClaim, p.cfg.BatchSize, p.cfg.Lease, p.cfg.Name, p.cfg.BatchSize*claimExtension)
	if err != nil {
		return 0, fmt.Errorf("claim outbox batch: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
		var c claimed
		err := r.Scan(&c.id, &c.aggType, &c.aggID, &c.version, &c.eventType, &c.traceParent, &c.traceState, &c.attempts)
		return c, err
	})
	if err != nil {
		return 0, fmt.Errorf("claim outbox batch: %w", err)
	}
	if len(batch) == 0 {
		return 0, nil
	}
	failpoint.Inject("poller.after-claim")
	groups := group(batch)
	// Every signal must be done before the lease can run out, or another
	// poller could claim the same rows while this one still signals.
	dctx, dcancel := context.WithTimeout(ctx, p.cfg.Lease-p.cfg.MarkTimeout)
	if p.cfg.unsafeShortLease {
		dctx, dcancel = context.WithCancel(ctx)
	}
	ok, failed := p.dispatch(dctx, groups)
	dcancel()
	failpoint.Inject("poller.after-signal")

	// Detached: marking must happen even when Stop cancelled ctx while the
	// signals were in flight, or every signalled row waits out its lease.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.MarkTimeout)
	defer cancel()
	markErr := p.settleDispatch(mctx, groups, ok, failed)
	p.metrics.Batch(len(batch), len(failed), time.Since(start))
	p.log.Debug("relayed batch", "claimed", len(batch), "aggregates", len(groups), "signalled", len(ok), "failed_aggregates", len(failed))
	switch {
	case markErr != nil:
		return len(batch), markErr
	case len(failed) == len(groups):
		// Temporal takes nothing: an outage; the loop backs off.
		return len(batch), fmt.Errorf("signal %d of %d aggregates (first error: %w)", len(failed), len(groups), failed[0].err)
	case len(failed) > 0:
		// Some aggregates failed, the others went through: their rows wait
		// with a backoff of their own, and the loop does not slow the rest.
		p.log.Warn("could not hand some aggregates to Temporal; their rows stay pending and are retried with a backoff",
			"failed_aggregates", len(failed), "of", len(groups), "first_aggregate", failed[0].workflowID, "first_error", failed[0].err)
	}
	return len(batch), nil
}

// quarantineRefused quarantines the rows of f that Temporal refused as
// invalid on their MaxRefusedAttempts-th claim (or later), with Temporal's
// reason, and returns the ids of the others, which are released as usual.
func (p *Poller) quarantineRefused(ctx context.Context, f failure) (release []string) {
	var give []claimed
	for _, r := range f.rows {
		if r.attempts >= p.cfg.MaxRefusedAttempts {
			give = append(give, r)
		} else {
			release = append(release, r.id)
		}
	}
	if len(give) == 0 {
		return release
	}
	ids := make([]string, len(give))
	for i, r := range give {
		ids[i] = r.id
	}
	msg := pgtext.Truncate(fmt.Sprintf("quarantined (%s): Temporal refused it as invalid %d times, so it can never be delivered as it is: %v",
		ErrClassTemporalRefused, give[0].attempts, f.err), 1000)
	rows, err := p.cfg.Pool.Query(ctx, sqlQuarantineRefused, ids, msg)
	var types []string
	if err == nil {
		types, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		// Released instead: the next claim counts another attempt and
		// tries to quarantine them again.
		p.log.Warn("could not quarantine rows Temporal refused", "aggregate", f.workflowID, "error", err)
		return append(release, ids...)
	}
	for _, t := range types {
		p.metrics.Quarantined(t, ErrClassTemporalRefused)
	}
	p.log.Warn("Temporal refused the events as invalid; quarantined them (ferry blocked lists them, ferry repair skips them)",
		"aggregate", f.workflowID, "events", len(ids), "attempts", give[0].attempts, "error", f.err)
	return release
}
