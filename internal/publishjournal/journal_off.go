//go:build !failpoints

package publishjournal

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Enabled: this build has the journal (the failpoints build tag). Without
// the tag it has none.
const Enabled = false

// Entry is one publish's row; without the failpoints tag, nothing.
type Entry struct{}

// Relay does nothing without the failpoints build tag.
func Relay(context.Context, *pgxpool.Pool, string, string, string, int64, int64, int64, time.Time) Entry {
	return Entry{}
}

// Run does nothing without the failpoints build tag.
func Run(context.Context, *pgxpool.Pool, string, string, int64, int64, int64) Entry {
	return Entry{}
}

// End does nothing without the failpoints build tag.
func (Entry) End(*error) {}
