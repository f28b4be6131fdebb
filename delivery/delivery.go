package delivery

import (
	"context"
	"errors"

	"github.com/ferry-outbox/ferry/relaydb"
)

// Event is one outbox row on its way out.
type Event struct {
	// ID is the event id: the message id consumers deduplicate by.
	ID  string
	Row relaydb.PublishRow
}

// Target sends events of one aggregate, in the order given, and reports
// how many leading ones it confirmed; err says why the next one was not
// (nothing after it is sent). Implementations are safe for concurrent
// use: the lane publishes many aggregates at once.
type Target interface {
	Publish(ctx context.Context, events []Event) (confirmed int, err error)
}

// The classes of a broker target's failures (package rabbitmq translates
// its broker's errors into them, keeping the broker's message and error
// in the chain). The callers classify by them: an activity's error type,
// the lane's handoff cause.
var (
	// ErrUnroutable: no queue is bound for the routing key, so the broker
	// returned the message. Not retryable until someone binds a queue; the
	// caller decides whether to wait.
	ErrUnroutable = errors.New("message returned unroutable")
	// ErrNacked: the broker refused to take responsibility for the
	// message. Retryable.
	ErrNacked = errors.New("message nacked by broker")
	// ErrUnavailable: the broker could not be reached, or the connection
	// broke before the confirm. Retryable; the message may or may not have
	// been queued (at-least-once: a retry can duplicate it).
	ErrUnavailable = errors.New("broker unavailable")
	// ErrTooLarge: the message is larger than the target sends, so it was
	// not sent. Not retryable: the same message never fits.
	ErrTooLarge = errors.New("message too large")
	// ErrRefused: the broker refused this message (RabbitMQ: a channel
	// exception such as 406 PRECONDITION_FAILED). Not retryable: it
	// refuses the same message again.
	ErrRefused = errors.New("message refused by broker")
)
