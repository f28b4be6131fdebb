package broker

import (
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Returns sorts a channel's basic.returns by message id, for publishers
// that share the channel: each waits for its own confirm and then asks
// whether its message came back. The broker sends a message's return
// before its ack, and the client delivers both from one reader goroutine
// in that order, so once a confirm has arrived its return (if any) is
// already in the channel given to NewReturns.
type Returns struct {
	ch <-chan amqp.Return

	mu   sync.Mutex
	byID map[string]amqp.Return // read off ch, not yet taken
}

// NewReturns reads ch, the channel given to amqp.Channel.NotifyReturn. It
// must be buffered (a return per message that can be in flight), so the
// client's reader never blocks on it.
func NewReturns(ch <-chan amqp.Return) *Returns {
	return &Returns{ch: ch, byID: map[string]amqp.Return{}}
}

// Take reports whether the message with id came back unroutable, and
// forgets it. Call it after the message's confirm.
func (r *Returns) Take(id string) (amqp.Return, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
drain:
	for {
		select {
		case ret, ok := <-r.ch:
			if !ok {
				// Closed with its channel: nothing more will arrive, and
				// reading on would spin forever holding r.mu.
				break drain
			}
			r.byID[ret.MessageId] = ret
		default:
			break drain
		}
	}
	ret, ok := r.byID[id]
	delete(r.byID, id)
	return ret, ok
}
