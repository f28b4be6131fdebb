package walrelay

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-outbox/ferry/poller"
	"github.com/ferry-outbox/ferry/relaydb"
)

// Dispatcher is what the stream hands events to and catches up with:
// *poller.Poller, not started (the relay drives it and joins the relays'
// registry through it).
type Dispatcher interface {
	Dispatch(ctx context.Context, events []poller.Event) (accepted []string, failed []poller.Failure)
	MarkDispatched(ctx context.Context, ids []string) error
	Drain(ctx context.Context) (int, error)
	// RelayAggregates is the publish-first lane's round for the streamed
	// aggregates (Lane says which lane the poller runs).
	RelayAggregates(ctx context.Context, keys []relaydb.AggregateKey) (int, error)
	Lane() string
	// ServeOwned runs the lane's workflow side until ctx ends (at once
	// in the workflow lane).
	ServeOwned(ctx context.Context)
	JoinFleet(ctx context.Context) error
	LeaveFleet()
}

// Config configures a Relay.
type Config struct {
	// Pool reaches the outbox; its connection settings (with
	// replication=database added) also open the replication connection,
	// which must be direct: no PgBouncer. Required.
	Pool *pgxpool.Pool
	// Poller dispatches the streamed events and runs the catch-up claims;
	// the relay never starts it. Required.
	Poller Dispatcher
	// Slot is the logical replication slot's name. Default "ferry_outbox".
	// One slot per outbox: two outboxes (schemas or databases) in one
	// cluster need two names, since slots are cluster-wide.
	Slot string
	// Publication's name; it publishes inserts into this schema's
	// outbox_events. Default "ferry_outbox".
	Publication string
	// CatchUpInterval is how often one claim pass of the polling path runs
	// (it also runs at start and after the slot was recreated). Default 30s.
	CatchUpInterval time.Duration
	// StatusInterval is how often the relay confirms its position to
	// PostgreSQL when nothing else made it, so a quiet outbox does not pin
	// WAL. Default 10s; it must stay below the server's wal_sender_timeout
	// (60s by default).
	StatusInterval time.Duration
	// StandbyRetry is how often a standby (the slot is in use elsewhere)
	// tries to take the slot. Default 1s.
	StandbyRetry time.Duration
	// BatchEvents bounds the events of one dispatch round. Default 1000.
	BatchEvents int
	// BatchWait is how long the stream collects further transactions after
	// the first complete one before it dispatches. Default 10ms.
	BatchWait time.Duration
	// MaxBackoff caps the wait after failures. Default 30s.
	MaxBackoff time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Defaults and limits of Config, which package ferry's Config takes too.
const (
	DefaultSlot            = "ferry_outbox"
	DefaultPublication     = "ferry_outbox"
	DefaultCatchUpInterval = 30 * time.Second
	MinCatchUpInterval     = time.Second
)

// objectName is what PostgreSQL accepts as a slot name (lower case, digits,
// underscore; at most 63 bytes), kept for the publication too.
var objectName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (cfg Config) withDefaults() Config {
	cfg.Slot = cmp.Or(cfg.Slot, DefaultSlot)
	cfg.Publication = cmp.Or(cfg.Publication, DefaultPublication)
	cfg.CatchUpInterval = cmp.Or(cfg.CatchUpInterval, DefaultCatchUpInterval)
	cfg.StatusInterval = cmp.Or(cfg.StatusInterval, 10*time.Second)
	cfg.StandbyRetry = cmp.Or(cfg.StandbyRetry, time.Second)
	cfg.BatchEvents = cmp.Or(cfg.BatchEvents, 1000)
	cfg.BatchWait = cmp.Or(cfg.BatchWait, 10*time.Millisecond)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 30*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return cfg
}

// Validate checks the settings (zero fields count as their defaults) but
// not the dependencies, so a command can reject bad flags before it dials.
func (cfg Config) Validate() error {
	cfg = cfg.withDefaults()
	switch {
	case !objectName.MatchString(cfg.Slot):
		return fmt.Errorf("walrelay: Config.Slot %q: use 1-63 lower-case letters, digits or '_', not starting with a digit", cfg.Slot)
	case !objectName.MatchString(cfg.Publication):
		return fmt.Errorf("walrelay: Config.Publication %q: use 1-63 lower-case letters, digits or '_', not starting with a digit", cfg.Publication)
	case cfg.CatchUpInterval < MinCatchUpInterval:
		return fmt.Errorf("walrelay: Config.CatchUpInterval %s: must be at least %s", cfg.CatchUpInterval, MinCatchUpInterval)
	case cfg.StatusInterval < 100*time.Millisecond || cfg.StatusInterval > 50*time.Second:
		return fmt.Errorf("walrelay: Config.StatusInterval %s: use 100ms to 50s (below wal_sender_timeout)", cfg.StatusInterval)
	case cfg.StandbyRetry < 10*time.Millisecond:
		return fmt.Errorf("walrelay: Config.StandbyRetry %s: must be at least 10ms", cfg.StandbyRetry)
	case cfg.BatchEvents < 1 || cfg.BatchEvents > 100_000:
		return fmt.Errorf("walrelay: Config.BatchEvents %d: must be 1 to 100000", cfg.BatchEvents)
	case cfg.BatchWait < 0 || cfg.BatchWait > time.Second:
		return fmt.Errorf("walrelay: Config.BatchWait %s: use 0 to 1s", cfg.BatchWait)
	case cfg.MaxBackoff < 100*time.Millisecond:
		return fmt.Errorf("walrelay: Config.MaxBackoff %s: must be at least 100ms", cfg.MaxBackoff)
	}
	return nil
}
