package poller

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-outbox/ferry/internal/backoff"
)

// listen keeps a dedicated LISTEN connection and turns notifications into
// wake-ups. After every (re)connect it wakes the loop once, covering rows
// committed while it was not listening.
func (p *Poller) listen(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := p.listenOnce(ctx, func() { failures = 0 })
		if ctx.Err() != nil {
			return
		}
		failures++
		wait := backoff.Exponential(retryBase, p.cfg.MaxBackoff, failures)
		p.log.Warn("LISTEN connection lost; polling every PollInterval until it is back",
			"error", err, "poll_interval", p.cfg.PollInterval, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (p *Poller) listenOnce(ctx context.Context, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, p.cfg.Pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	connected()
	p.poke()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		p.poke()
	}
}

func (p *Poller) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
	p.pokeOwned() // new rows may be of aggregates workflows own
}
