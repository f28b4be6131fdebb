package walrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"go.temporal.io/api/serviceerror"

	"github.com/ferry-outbox/ferry/internal/backoff"
	"github.com/ferry-outbox/ferry/internal/startstop"
	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/relaydb"
)

// dispatchTimeout bounds one dispatch attempt of a batch. The stream is not
// read meanwhile, so it stays well below wal_sender_timeout (60s by
// default), after which PostgreSQL drops a silent replication connection.
const dispatchTimeout = 20 * time.Second

// Relay streams outbox inserts from a replication slot to Temporal.
type Relay struct {
	cfg  Config
	log  *slog.Logger
	run  startstop.Runner
	poke chan struct{} // asks for a catch-up pass now
	// replan asks the catch-up loop to look again when the next pending row
	// is due: the stream left a delayed row to it.
	replan chan struct{}
	schema string // the outbox's schema, read at Start

	lackOnce sync.Once // the warning that the stream lacks deliver_after

	// visibleTimeout bounds the wait for streamed rows to become visible
	// (onlyVisible); defaultVisibleTimeout.
	visibleTimeout time.Duration

	mu       sync.Mutex
	takeover time.Duration // how long the last standby wait took
	streamed int64         // events handed to Temporal from the stream
}

// New validates cfg and fills its defaults.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if cfg.Pool == nil {
		return nil, errors.New("walrelay: Config.Pool is nil")
	}
	if cfg.Poller == nil {
		return nil, errors.New("walrelay: Config.Poller is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Relay{cfg: cfg, poke: make(chan struct{}, 1), replan: make(chan struct{}, 1), visibleTimeout: defaultVisibleTimeout,
		log: cfg.Logger.With("component", "walrelay", "slot", cfg.Slot)}, nil
}

// Start checks that PostgreSQL can serve log tailing (wal_level, the
// role's REPLICATION attribute, slots left, the publication's table),
// creates the publication and the slot when missing, and starts the stream
// and the catch-up pass. A misconfiguration is its error; it does not wait
// for the slot (a standby starts as any other relay). Creating the slot
// waits for the transactions open at that moment to end.
func (r *Relay) Start(ctx context.Context) error {
	created, err := prepare(ctx, r.cfg.Pool, r.cfg.Slot, r.cfg.Publication)
	if err != nil {
		return fmt.Errorf("walrelay: %w", err)
	}
	if err := r.cfg.Poller.JoinFleet(ctx); err != nil {
		return err
	}
	if err := r.cfg.Pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&r.schema); err != nil {
		return fmt.Errorf("walrelay: read the current schema: %w", err)
	}
	if created {
		r.log.Info("created the replication slot; rows committed before it are delivered by the catch-up pass",
			"publication", r.cfg.Publication)
	}
	err = r.run.Start(ctx, func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Go(func() { r.catchUpLoop(ctx) })
		wg.Go(func() { r.streamLoop(ctx) })
		wg.Go(func() { r.cfg.Poller.ServeOwned(ctx) })
		wg.Wait()
	})
	if err != nil {
		r.cfg.Poller.LeaveFleet()
		return fmt.Errorf("walrelay: %w", err)
	}
	return nil
}

// Stop ends the stream and the catch-up pass and waits for the batch in
// hand (its position is confirmed once its events are handed over or left
// to the claim pass), then leaves the relays' registry. Safe to call more
// than once.
func (r *Relay) Stop() {
	r.run.Stop()
	r.cfg.Poller.LeaveFleet()
}

// Streamed is how many events the stream handed to Temporal so far.
func (r *Relay) Streamed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.streamed
}

// LastTakeover is how long this relay waited as a standby before it got
// the slot, the last time it had to (zero: it never waited).
func (r *Relay) LastTakeover() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.takeover
}

// catchUpLoop runs a claim pass at start, every CatchUpInterval, on a poke,
// and when the next pending row becomes claimable, if that is sooner: a
// delayed row (deliver_after, or held behind an earlier delayed version)
// is never streamed, so this pass delivers it, as soon as it is due rather
// than up to CatchUpInterval late; the same goes for a row released with a
// backoff or a lease that ran out.
func (r *Relay) catchUpLoop(ctx context.Context) {
	timer := time.NewTimer(r.cfg.CatchUpInterval)
	defer timer.Stop()
	for {
		n, err := r.cfg.Poller.Drain(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			r.log.Warn("catch-up pass failed; its rows stay pending for the next one", "claimed", n, "error", err)
		case n > 0:
			r.log.Info("catch-up pass claimed rows the stream had not delivered (pending before the slot, missed while it was gone, or delayed until now; some may be in flight in the stream, and the workflow drops the repeats)", "claimed", n)
		}
		latest := time.Now().Add(r.cfg.CatchUpInterval)
		for waiting := true; waiting; {
			// Timers of Go 1.23 and later: Reset after Stop or expiry never
			// sees a stale tick.
			timer.Reset(time.Until(r.nextPass(ctx, latest)))
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				waiting = false
			case <-r.poke:
				timer.Stop()
				waiting = false
			case <-r.replan:
				timer.Stop()
			}
		}
	}
}

// sqlNextDue is how long until the first pending row becomes claimable,
// on the database's clock (the claim's), through the pending rows' index
// on next_attempt_at (0001). NULL when none waits. A row the stream left
// to the pass (due after it was written: deliver_after > created_at) that
// became due in the last second and is still pending counts too, at a
// negative time (a pass at once): it can have become due between the
// pass's claim and this query, and no later due time would bring it before
// the CatchUpInterval. Rows due when written are the stream's, and a pass
// for them would only repeat its work.
const sqlNextDue = `
SELECT extract(epoch FROM min(next_attempt_at) - now()) FROM outbox_events
WHERE status = 'pending' AND next_attempt_at > now() - interval '1 second'
  AND (next_attempt_at > now() OR deliver_after > created_at)`

// dueMargin is added to a due time: the claim's now() must be past it.
const dueMargin = 5 * time.Millisecond

// overdueSpacing is the wait before a pass for a row that is due already.
const overdueSpacing = 50 * time.Millisecond

// nextPass is when the next catch-up pass runs: when the first pending row
// becomes claimable, or at latest (also when the outbox cannot be read;
// the pass itself reports that).
func (r *Relay) nextPass(ctx context.Context, latest time.Time) time.Time {
	var secs *float64
	if err := r.cfg.Pool.QueryRow(ctx, sqlNextDue).Scan(&secs); err != nil || secs == nil {
		return latest
	}
	wait := time.Duration(*secs*float64(time.Second)) + dueMargin
	if *secs <= 0 {
		// Due already and left pending by the pass that just ran: the
		// next one a moment later, so a row the claim cannot take (a
		// lock, a failed dispatch) never spins the loop.
		wait = overdueSpacing
	}
	due := time.Now().Add(wait)
	if due.Before(latest) {
		return due
	}
	return latest
}

func (r *Relay) replanCatchUp() {
	select {
	case r.replan <- struct{}{}:
	default:
	}
}

func (r *Relay) catchUpNow() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

func (r *Relay) streamLoop(ctx context.Context) {
	failures := 0
	var standbySince time.Time
	for ctx.Err() == nil {
		err := r.stream(ctx, func() {
			failures = 0
			if !standbySince.IsZero() {
				waited := time.Since(standbySince)
				r.mu.Lock()
				r.takeover = waited
				r.mu.Unlock()
				r.log.Info("took over the replication slot", "waited_as_standby", waited.Round(time.Millisecond))
				standbySince = time.Time{}
			}
		})
		if ctx.Err() != nil {
			return
		}
		wait := time.Duration(0)
		var inUse *SlotInUseError
		switch {
		case errors.As(err, &inUse):
			if standbySince.IsZero() {
				standbySince = time.Now()
				r.log.Info("the replication slot is in use by another process; waiting as a standby until it is free",
					"active_pid", inUse.PID, "retry_every", r.cfg.StandbyRetry)
			}
			wait = r.cfg.StandbyRetry
		case errors.Is(err, ErrSlotMissing):
			r.log.Error("the replication slot was dropped behind Ferry's back: rows committed while it was gone are not in any stream; recreating it, and the catch-up pass delivers them",
				"error", err)
			if _, cerr := ensureSlot(ctx, r.cfg.Pool, r.cfg.Slot); cerr != nil {
				failures++
				wait = backoff.Exponential(retryBase, r.cfg.MaxBackoff, failures)
				r.log.Error("could not recreate the replication slot", "error", cerr, "retry_in", wait)
			} else {
				r.catchUpNow()
			}
		default:
			failures++
			wait = backoff.Exponential(retryBase, r.cfg.MaxBackoff, failures)
			r.log.Warn("replication stream lost; reconnecting, and the stream resumes after the last confirmed transaction",
				"error", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// stream runs one replication connection until it fails or ctx ends.
func (r *Relay) stream(ctx context.Context, connected func()) error {
	pcfg := r.cfg.Pool.Config().ConnConfig.Config.Copy()
	pcfg.RuntimeParams["replication"] = "database"
	// deliver_after arrives as text in the session's DateStyle; the decoder
	// reads ISO.
	pcfg.RuntimeParams["datestyle"] = "ISO"
	conn, err := pgconn.ConnectConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("open replication connection: %w", translateConnect(pcfg.User, err))
	}
	defer func() {
		// Detached: ctx may be cancelled, and the close needs a moment.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	err = pglogrepl.StartReplication(ctx, conn, pgx.Identifier{r.cfg.Slot}.Sanitize(), 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		// Version 1: every transaction whole, at its commit, in commit order.
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pgx.Identifier{r.cfg.Publication}.Sanitize() + "'"},
	})
	if err != nil {
		return translateStart(r.cfg.Slot, err)
	}
	connected()
	s := &session{r: r, conn: conn, dec: newDecoder(r.schema)}
	return s.run(ctx)
}

// session is one replication connection's state.
type session struct {
	r    *Relay
	conn *pgconn.PgConn
	dec  *decoder

	pending   []*txn        // committed, not yet dispatched
	events    int           // in pending
	flushBy   time.Time     // when pending must be dispatched
	confirmed pglogrepl.LSN // what this session confirms; 0: nothing yet
}

func (s *session) run(ctx context.Context) error {
	cfg := s.r.cfg
	nextStatus := time.Now().Add(cfg.StatusInterval)
	for {
		if len(s.pending) > 0 && (s.events >= cfg.BatchEvents || !time.Now().Before(s.flushBy)) {
			if err := s.flush(ctx); err != nil {
				return err
			}
			nextStatus = time.Now().Add(cfg.StatusInterval)
			continue
		}
		deadline := nextStatus
		if len(s.pending) > 0 && s.flushBy.Before(deadline) {
			deadline = s.flushBy
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		msg, err := s.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				if !time.Now().Before(nextStatus) {
					if err := s.sendStatus(ctx); err != nil {
						return err
					}
					nextStatus = time.Now().Add(cfg.StatusInterval)
				}
				continue
			}
			return fmt.Errorf("receive from the replication stream: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("%w: %w", errProtocol, err)
				}
				// Everything committed before ServerWALEnd was sent before
				// this keepalive: with nothing in hand, it is all handled,
				// and confirming it lets a quiet outbox release WAL.
				if len(s.pending) == 0 && !s.dec.inTransaction() && ka.ServerWALEnd > s.confirmed {
					s.confirmed = ka.ServerWALEnd
				}
				if ka.ReplyRequested {
					if err := s.sendStatus(ctx); err != nil {
						return err
					}
					nextStatus = time.Now().Add(cfg.StatusInterval)
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fmt.Errorf("%w: %w", errProtocol, err)
				}
				lm, err := pglogrepl.Parse(xld.WALData)
				if err != nil {
					return fmt.Errorf("%w: %w", errProtocol, err)
				}
				t, err := s.dec.feed(lm)
				if err != nil {
					return err
				}
				if t != nil {
					if len(s.pending) == 0 {
						s.flushBy = time.Now().Add(cfg.BatchWait)
					}
					s.pending = append(s.pending, t)
					s.events += len(t.events)
				}
			}
		case *pgproto3.ErrorResponse:
			return translateStart(cfg.Slot, pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("PostgreSQL ended the replication stream")
		}
	}
}

// flush hands the pending transactions' events to Temporal, retrying the
// aggregates it failed (with backoff, keeping the connection alive) until
// it accepted all of them, marks them dispatched, and only then confirms
// the last transaction's end. A stop in between confirms nothing: the
// stream replays those transactions to the next relay. The one exception
// is an aggregate Temporal refuses as invalid (InvalidArgument): its rows
// stay pending for the claim pass, which owns retries and quarantine.
func (s *session) flush(ctx context.Context) error {
	cfg := s.r.cfg
	var events []poller.Event
	var unknown []string
	delayed := 0
	for _, t := range s.pending {
		events = append(events, t.events...)
		unknown = append(unknown, t.unknown...)
		delayed += t.delayed
	}
	end := s.pending[len(s.pending)-1].end
	if len(unknown) > 0 {
		var n int
		var err error
		if events, n, err = s.r.dropDelayed(ctx, events, unknown); err != nil {
			return err
		}
		delayed += n
	}
	if delayed > 0 {
		// Not streamed: the catch-up pass claims them when they are due.
		s.r.replanCatchUp()
	}
	events, err := s.r.onlyVisible(ctx, events)
	if err != nil {
		return err
	}
	total := len(events)
	if cfg.Poller.Lane() == poller.LanePublishFirst {
		s.relayDirect(ctx, events)
	}
	for failures := 0; len(events) > 0 && cfg.Poller.Lane() != poller.LanePublishFirst; {
		dctx, cancel := context.WithTimeout(ctx, dispatchTimeout)
		accepted, failed := cfg.Poller.Dispatch(dctx, events)
		cancel()
		if len(accepted) > 0 {
			// Detached: the workflows have these events; a stop must not
			// leave their rows pending for the next catch-up pass.
			if err := cfg.Poller.MarkDispatched(context.WithoutCancel(ctx), accepted); err != nil {
				s.r.log.Warn("could not mark streamed rows dispatched; the catch-up pass signals them again and the workflows drop the repeats", "error", err)
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		retry := map[string]bool{}
		var invalid []poller.Failure
		for _, f := range failed {
			if permanent(f.Err) {
				invalid = append(invalid, f)
				continue
			}
			for _, id := range f.IDs {
				retry[id] = true
			}
		}
		if len(invalid) > 0 {
			// Retrying a request Temporal refuses as invalid would hold the
			// stream, and every aggregate behind it, for good. The rows stay
			// pending: the claim pass takes them over, with its backoff and
			// its quarantine.
			s.r.log.Warn("Temporal refused streamed events as invalid; they stay pending for the claim pass and the stream moves on",
				"aggregates", len(invalid), "first_aggregate", invalid[0].WorkflowID, "first_error", invalid[0].Err)
		}
		events = slices.DeleteFunc(events, func(e poller.Event) bool { return !retry[e.ID] })
		if len(events) == 0 {
			break
		}
		failures++
		wait := backoff.Exponential(retryBase, cfg.MaxBackoff, failures)
		s.r.log.Warn("Temporal refused streamed events; retrying them before the stream moves on",
			"aggregates", len(failed), "events", len(events), "first_error", failed[0].Err, "retry_in", wait)
		if err := s.sendStatus(ctx); err != nil { // keeps wal_sender_timeout away
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	s.r.mu.Lock()
	s.r.streamed += int64(total)
	s.r.mu.Unlock()
	s.pending, s.events = s.pending[:0], 0
	s.confirmed = max(s.confirmed, end)
	return s.sendStatus(ctx)
}

// relayDirect is flush in the publish-first lane: the streamed rows'
// aggregates get one round of the lane (poller.RelayAggregates), which
// publishes their next events or hands them to the workflows that own
// them. Whatever it leaves (an aggregate another relay or the catch-up
// pass is publishing: it runs another round when it releases one with
// later versions; a version not due yet: the catch-up pass claims it when
// due) stays pending, and the stream moves on: one aggregate never holds
// up the others.
func (s *session) relayDirect(ctx context.Context, events []poller.Event) {
	seen := map[relaydb.AggregateKey]bool{}
	var keys []relaydb.AggregateKey
	for _, e := range events {
		k := relaydb.AggregateKey{Type: e.AggregateType, ID: e.AggregateID}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, dispatchTimeout)
	defer cancel()
	if _, err := s.r.cfg.Poller.RelayAggregates(dctx, keys); err != nil && ctx.Err() == nil {
		s.r.log.Warn("could not relay streamed events; they stay pending for the catch-up pass", "aggregates", len(keys), "error", err)
		s.r.catchUpNow()
	}
}

// sqlDelayed picks, of rows streamed without deliver_after, those that
// wait for it (or for an earlier delayed version of their aggregate).
const sqlDelayed = `SELECT id::text FROM outbox_events WHERE id = ANY($1::uuid[]) AND deliver_after > now()`

// dropDelayed looks up the delay of the rows in unknown (their stream
// lacked deliver_after) and returns events without the delayed ones, and
// how many it dropped. An error ends the session: its transactions are
// replayed.
func (r *Relay) dropDelayed(ctx context.Context, events []poller.Event, unknown []string) ([]poller.Event, int, error) {
	r.lackOnce.Do(func() {
		r.log.Warn("the publication does not stream outbox_events.deliver_after: each streamed batch asks the database which rows are delayed; add the column to the publication's column list to spare the query",
			"publication", r.cfg.Publication)
	})
	rows, err := r.cfg.Pool.Query(ctx, sqlDelayed, unknown)
	if err != nil {
		return nil, 0, fmt.Errorf("read the delays of streamed rows: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, 0, fmt.Errorf("read the delays of streamed rows: %w", err)
	}
	if len(ids) == 0 {
		return events, 0, nil
	}
	wait := make(map[string]bool, len(ids))
	for _, id := range ids {
		wait[id] = true
	}
	n := len(events)
	events = slices.DeleteFunc(events, func(e poller.Event) bool { return wait[strings.ToLower(e.ID)] })
	return events, n - len(events), nil
}

func (s *session) sendStatus(ctx context.Context) error {
	if s.confirmed == 0 {
		return nil
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: s.confirmed, WALFlushPosition: s.confirmed, WALApplyPosition: s.confirmed,
	})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	return nil
}

// permanent: Temporal refused the request as invalid, so it fails the same
// way however often it is sent. Unavailable, DeadlineExceeded and the like
// are outages, retried.
func permanent(err error) bool {
	var invalid *serviceerror.InvalidArgument
	return errors.As(err, &invalid)
}

// retryBase is the first wait after a failure; it doubles up to
// MaxBackoff.
const retryBase = 500 * time.Millisecond
