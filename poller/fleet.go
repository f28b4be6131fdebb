package poller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Every relay of one outbox runs the same lane: a poller of the workflow
// lane beside one of the publish-first lane would have a workflow run and
// a relay publish one aggregate at once. Relays register in ferry_relays
// (migration 0010) when they start, refresh their row while they run and
// delete it when they stop; a start that finds a relay of the other lane
// seen within fleetStale is refused, naming it. The check and the insert
// run under a table lock, so two relays of different lanes starting
// together cannot both pass.

const (
	// fleetHeartbeat: how often a relay refreshes its row.
	fleetHeartbeat = 5 * time.Second
	// fleetStale: a relay not seen for this long is taken to be gone (a
	// killed process leaves its row; the next start removes it).
	fleetStale = 30 * time.Second
)

// MixedFleetError refuses a relay whose lane differs from one that runs.
type MixedFleetError struct {
	Lane      string // this relay's
	Other     string // the other relay's name (its poller name and an instance id)
	OtherLane string
	Source    string
	Seen      time.Duration // how long ago the other relay was seen
}

func (e *MixedFleetError) Error() string {
	return fmt.Sprintf("poller: relay %s runs the %s lane (source %s, seen %s ago), and every relay of one outbox must run the same lane: "+
		"stop it and start this one again, or start this one with --lane %s; a relay that was killed counts as gone %s after it was last seen",
		e.Other, e.OtherLane, e.Source, e.Seen.Round(time.Second), e.OtherLane, fleetStale)
}

const (
	sqlFleetLock  = `LOCK TABLE ferry_relays IN SHARE ROW EXCLUSIVE MODE`
	sqlFleetPrune = `DELETE FROM ferry_relays WHERE seen_at < now() - $1::interval`
	// sqlFleetOther finds the most recently seen relay of another lane.
	sqlFleetOther = `
SELECT name, lane, source, extract(epoch FROM now() - seen_at) FROM ferry_relays
WHERE lane <> $1 AND name <> $2 AND seen_at >= now() - $3::interval
ORDER BY seen_at DESC LIMIT 1`
	sqlFleetJoin = `
INSERT INTO ferry_relays (name, lane, source) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET lane = EXCLUDED.lane, source = EXCLUDED.source, seen_at = now()`
	sqlFleetSeen  = `UPDATE ferry_relays SET seen_at = now() WHERE name = $1`
	sqlFleetLeave = `DELETE FROM ferry_relays WHERE name = $1`
)

// fleetMember is a poller's membership: its row and its heartbeat.
type fleetMember struct {
	p    *Poller
	name string

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func newFleetMember(p *Poller) *fleetMember {
	return &fleetMember{p: p, name: p.cfg.Name + "/" + uuid.NewString()[:8]}
}

// JoinFleet registers this relay in the outbox's fleet and starts its
// heartbeat, refusing with a *MixedFleetError when a relay of the other
// lane runs. Start calls it; a relay that drives the poller without Start
// (package walrelay) calls it itself, and LeaveFleet when it stops.
// Joining again is a no-op.
func (p *Poller) JoinFleet(ctx context.Context) error {
	f := p.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil {
		return nil
	}
	if err := f.join(ctx); err != nil {
		return err
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.cancel, f.done = cancel, make(chan struct{})
	go func() {
		defer close(f.done)
		f.heartbeat(hctx)
	}()
	return nil
}

// LeaveFleet stops the heartbeat and deletes this relay's row. Safe to
// call more than once, and without JoinFleet.
func (p *Poller) LeaveFleet() {
	f := p.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel == nil {
		return
	}
	f.cancel()
	<-f.done
	f.cancel = nil
	// Detached with its own bound: a relay that cannot delete its row is
	// taken to be gone after fleetStale anyway.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := f.p.cfg.Pool.Exec(ctx, sqlFleetLeave, f.name); err != nil {
		f.p.log.Warn("could not leave the relays' registry (ferry_relays); the row counts as gone after it goes stale", "stale_after", fleetStale, "error", err)
	}
}

func (f *fleetMember) join(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, f.p.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlFleetLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlFleetPrune, fleetStale); err != nil {
			return err
		}
		var other MixedFleetError
		var seen float64
		err := tx.QueryRow(ctx, sqlFleetOther, f.p.cfg.Lane, f.name, fleetStale).Scan(&other.Other, &other.OtherLane, &other.Source, &seen)
		switch {
		case err == nil:
			other.Lane, other.Seen = f.p.cfg.Lane, time.Duration(seen*float64(time.Second))
			return &other
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		_, err = tx.Exec(ctx, sqlFleetJoin, f.name, f.p.cfg.Lane, f.p.cfg.Source)
		return err
	})
	var mixed *MixedFleetError
	if errors.As(err, &mixed) {
		return err
	}
	if err != nil {
		return fmt.Errorf("poller: join the relays' registry (ferry_relays; has `ferry migrate` run?): %w", err)
	}
	return nil
}

// heartbeat refreshes the row until ctx ends. A row that is gone (pruned
// while this relay could not reach the database) is joined again, and a
// relay of the other lane found then is logged as the error it is.
func (f *fleetMember) heartbeat(ctx context.Context) {
	t := time.NewTicker(fleetHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tag, err := f.p.cfg.Pool.Exec(ctx, sqlFleetSeen, f.name)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			f.p.log.Warn("could not refresh this relay's row in ferry_relays", "error", err)
		case tag.RowsAffected() == 0:
			if err := f.join(ctx); err != nil && ctx.Err() == nil {
				f.p.log.Error("this relay's registration lapsed and it cannot join again: relays of two lanes may be running; stop one of them", "error", err)
			}
		}
	}
}
