package walrelay

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors a user fixes in PostgreSQL or in Ferry's settings. Each says
// whether the relay retries it on its own.
var (
	// ErrWALLevel: wal_level is not logical. Not retried: it takes a
	// PostgreSQL restart.
	ErrWALLevel = errors.New("wal_level is not logical")
	// ErrNoReplicationPrivilege: the role lacks the REPLICATION attribute.
	// Not retried.
	ErrNoReplicationPrivilege = errors.New("the role may not open a replication connection")
	// ErrSlotLimit: max_replication_slots are all taken. Not retried at
	// start; retried (with backoff) when the slot must be recreated.
	ErrSlotLimit = errors.New("all replication slots are in use")
	// ErrPublicationMissingTable: the publication exists and does not
	// publish this schema's outbox_events. Not retried.
	ErrPublicationMissingTable = errors.New("the publication does not publish outbox_events")
	// ErrSlotInUse: another process streams from the slot. Retried: this
	// relay waits as a standby.
	ErrSlotInUse = errors.New("the replication slot is in use by another process")
	// ErrSlotMissing: the slot disappeared (dropped behind Ferry's back).
	// Retried: the relay recreates it and runs a catch-up pass, which
	// delivers the rows the stream cannot.
	ErrSlotMissing = errors.New("the replication slot does not exist")
)

// SQLSTATEs the relay translates.
const (
	codeObjectInUse       = "55006" // START_REPLICATION on an active slot
	codeUndefinedObject   = "42704" // the slot does not exist
	codeDuplicateObject   = "42710" // created concurrently by another process
	codeUniqueViolation   = "23505" // the same, while the other transaction was open
	codeUndefinedColumn   = "42703" // the outbox lacks a migration's column
	codeConfigLimit       = "53400" // max_replication_slots reached
	codeInsufficientPriv  = "42501" // no REPLICATION attribute
	codeInvalidAuthSpec   = "28000" // pg_hba refuses the replication connection
	codeObjectNotInPrereq = "55000" // e.g. wal_level too low for a logical slot
)

var activePID = regexp.MustCompile(`active for PID (\d+)`)

// SlotInUseError is ErrSlotInUse with the PID of the walsender that holds
// the slot (0 when PostgreSQL did not say).
type SlotInUseError struct {
	Slot string
	PID  int
	Err  error // PostgreSQL's error
}

func (e *SlotInUseError) Error() string {
	return fmt.Sprintf("replication slot %q is in use by PID %d (another WAL relay?)", e.Slot, e.PID)
}

func (e *SlotInUseError) Is(target error) bool { return target == ErrSlotInUse }
func (e *SlotInUseError) Unwrap() error        { return e.Err }

// translateStart turns START_REPLICATION's error into a sentinel, keeping
// PostgreSQL's error reachable.
func translateStart(slot string, err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return err
	}
	switch pg.Code {
	case codeObjectInUse:
		pid := 0
		if m := activePID.FindStringSubmatch(pg.Message); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		return &SlotInUseError{Slot: slot, PID: pid, Err: err}
	case codeUndefinedObject:
		return fmt.Errorf("%w: replication slot %q: %w", ErrSlotMissing, slot, err)
	}
	return err
}

// translateConnect names the fix when the replication connection is
// refused for want of privilege.
func translateConnect(user string, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == codeInsufficientPriv || pg.Code == codeInvalidAuthSpec) {
		return fmt.Errorf("%w: %s\n  Grant it (ALTER ROLE %s REPLICATION) and allow replication connections in pg_hba.conf, or set Config.Source to poll: %w",
			ErrNoReplicationPrivilege, pg.Message, user, err)
	}
	return err
}

// translateCreateSlot names the fix when the slot cannot be created.
func translateCreateSlot(slot string, maxSlots string, err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return err
	}
	switch pg.Code {
	case codeConfigLimit:
		return fmt.Errorf("%w (max_replication_slots = %s): cannot create slot %q\n  Drop an unused slot (SELECT slot_name FROM pg_replication_slots WHERE NOT active) or raise max_replication_slots: %w",
			ErrSlotLimit, maxSlots, slot, err)
	case codeInsufficientPriv:
		return fmt.Errorf("%w: cannot create slot %q\n  Grant REPLICATION to Ferry's role, or set Config.Source to poll: %w", ErrNoReplicationPrivilege, slot, err)
	case codeObjectNotInPrereq:
		return fmt.Errorf("%w: cannot create slot %q: %w", ErrWALLevel, slot, err)
	}
	return err
}
