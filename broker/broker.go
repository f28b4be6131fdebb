package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Config configures a Publisher.
type Config struct {
	// URL of the broker, e.g. amqp://guest:guest@127.0.0.1:5672/ (or amqps://
	// with peer verification). Required.
	URL string
	// Exchange is the durable topic exchange events go to. Default "ferry.events".
	Exchange string
	// DialTimeout bounds connecting and declaring the exchange. Default 10s.
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat the connection asks for (the broker
	// takes the shorter of its own and this). A connection silent for about
	// three of them is dropped by the broker, with whatever it still held
	// unrouted. Default DefaultHeartbeat (10s, the client library's).
	Heartbeat time.Duration
	// MaxMessageBytes is the largest message body the Publisher sends; a
	// larger one fails with ErrTooLarge before anything goes on the wire.
	// Keep it at or below the broker's max_message_size, which RabbitMQ
	// checks against the body too: over it, the broker closes the channel
	// (406 PRECONDITION_FAILED, ErrRefused). Default DefaultMaxMessageBytes
	// (16 MiB, RabbitMQ 4's default); at most 512 MiB, RabbitMQ's hard
	// limit.
	MaxMessageBytes int
}

// DefaultHeartbeat is Config.Heartbeat's default.
const DefaultHeartbeat = 10 * time.Second

// DefaultMaxMessageBytes is Config.MaxMessageBytes' default: RabbitMQ 4's
// default max_message_size (RabbitMQ 3 allowed 128 MiB).
const DefaultMaxMessageBytes = 16 << 20

// MaxMessageBytesLimit is RabbitMQ's hard limit on max_message_size, the
// most Config.MaxMessageBytes may be.
const MaxMessageBytesLimit = 512 << 20

// Defaults of Config, which package ferry's Config takes too.
const (
	DefaultExchange    = "ferry.events"
	DefaultDialTimeout = 10 * time.Second
)

// ExchangePattern is what Config.Exchange matches: 1-255 letters, digits,
// '_', '.', ':' or '-'.
const ExchangePattern = `^[A-Za-z0-9_.:-]{1,255}$`

// Message is one event on the wire.
type Message struct {
	ID         string // message_id: the event id
	Type       string // type: the event type
	RoutingKey string
	Headers    amqp.Table
	Body       []byte
	Timestamp  time.Time
}

var (
	// ErrUnroutable: no queue is bound for the routing key, so the broker
	// returned the message. Not retryable until someone binds a queue; the
	// caller decides whether to wait.
	ErrUnroutable = errors.New("message returned unroutable")
	// ErrNacked: the broker refused to take responsibility for the message
	// (e.g. an internal error or a full queue with reject-publish). Retryable.
	ErrNacked = errors.New("message nacked by broker")
	// ErrUnavailable: the broker could not be reached or the connection broke
	// before the confirm. Retryable; the message may or may not have been
	// queued (at-least-once: a retry can duplicate it).
	ErrUnavailable = errors.New("broker unavailable")
	// ErrTooLarge: the message body is larger than Config.MaxMessageBytes,
	// so it was not sent. Not retryable: the same message never fits.
	ErrTooLarge = errors.New("message too large")
	// ErrRefused: the broker closed the channel refusing this message with
	// a channel exception (406 PRECONDITION_FAILED, e.g. a body over its
	// max_message_size); the *amqp.Error is in the chain. Not retryable:
	// the broker refuses the same message again. Other messages in flight
	// on that channel fail with ErrUnavailable, and the connection stays.
	ErrRefused = errors.New("message refused by broker")
	// ErrClosed: Close was called.
	ErrClosed = errors.New("publisher closed")
	// ErrUnsettled comes with ErrUnavailable when a confirm was lost and
	// the broker did not end the channel or connection itself: the caller
	// gave the confirm up (its context ended) and the broker did not answer
	// the connection's close within CloseWait, or the client dropped the
	// connection (a missed heartbeat, a socket error). What the connection
	// held may still be routed until the broker drops it (about three
	// heartbeats, Config.Heartbeat).
	ErrUnsettled = errors.New("the broker did not answer the connection's close")
)

// Publisher publishes messages with confirms over one lazily dialled
// connection. It is safe for concurrent use.
type Publisher struct {
	cfg Config

	mu     sync.Mutex
	closed bool
	cur    *session // nil until dialled, and after a failure
}

// session is one confirm channel and its connection. A channel exception
// closes only the channel: the next session opens another channel on the
// same connection. Returns belong to the session they came back on, so a
// new channel or a redial never mixes them up.
type session struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns *Returns
	// closes receives the channel's close reason (NotifyClose). The client
	// sends it before it fails the pending confirms, so a confirm lost to
	// a closed channel finds the reason here.
	closes chan *amqp.Error

	mu sync.Mutex
	// routed: routing keys a message was confirmed routed with, and when.
	// A batch sends messages with such a key without waiting in between.
	routed map[string]time.Time
	// closedBy is the reason read off closes, kept for every publish that
	// was in flight on the channel.
	closedBy *amqp.Error
	// settled: abandon closed the connection and the broker answered
	// (guarded by the Publisher's mu).
	settled bool
}

// routedFor is how long a confirmed route is trusted without a fresh
// confirm. It bounds the window in which an unbinding can let a later
// message of a batch overtake an earlier one.
const routedFor = 5 * time.Second

func (s *session) routes(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.routed[key]
	return ok && time.Since(at) < routedFor
}

// closeReason is why the broker or the connection closed the channel; nil
// while it is open, or when the client closed it.
func (s *session) closeReason() *amqp.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closedBy == nil {
		select {
		case e, ok := <-s.closes:
			if ok {
				s.closedBy = e
			}
		default:
		}
	}
	return s.closedBy
}

// channelOnly says whether only the channel failed: the broker closed it
// with a channel exception (a soft error such as 406 or 404) and the
// connection is still up, so other publishers need no redial.
func (s *session) channelOnly() bool {
	r := s.closeReason()
	return r != nil && r.Server && r.Recover && !s.conn.IsClosed()
}

func (s *session) noteRoute(key string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.routed[key] = time.Now()
	} else {
		delete(s.routed, key)
	}
}

var exchangeName = regexp.MustCompile(ExchangePattern)

// New validates cfg. It does not dial: the first Publish (or Connect) does.
func New(cfg Config) (*Publisher, error) {
	cfg.Exchange = cmp.Or(cfg.Exchange, DefaultExchange)
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, DefaultDialTimeout)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, DefaultHeartbeat)
	if cfg.Heartbeat < time.Second {
		return nil, fmt.Errorf("broker: Config.Heartbeat %s: must be at least 1s", cfg.Heartbeat)
	}
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, DefaultMaxMessageBytes)
	if cfg.MaxMessageBytes < 0 || cfg.MaxMessageBytes > MaxMessageBytesLimit {
		return nil, fmt.Errorf("broker: Config.MaxMessageBytes %d: must be between 1 and %d (RabbitMQ's hard limit on max_message_size)",
			cfg.MaxMessageBytes, MaxMessageBytesLimit)
	}
	if cfg.URL == "" {
		return nil, errors.New("broker: Config.URL is empty")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		return nil, fmt.Errorf("broker: Config.URL %q: must be amqp://… or amqps://…", Redact(cfg.URL))
	}
	if !exchangeName.MatchString(cfg.Exchange) {
		return nil, fmt.Errorf("broker: Config.Exchange %q: use 1-255 letters, digits, '_', '.', ':' or '-'", cfg.Exchange)
	}
	return &Publisher{cfg: cfg}, nil
}

// Exchange is the exchange messages go to.
func (p *Publisher) Exchange() string { return p.cfg.Exchange }

// Connect dials (if not connected) and declares the exchange. Publish calls
// it too; call it at start-up to fail early with a clear error.
func (p *Publisher) Connect(ctx context.Context) error {
	_, err := p.session(ctx)
	return err
}

// Publish sends msg and waits for the broker's confirm.
func (p *Publisher) Publish(ctx context.Context, msg Message) error {
	_, err := p.PublishBatch(ctx, []Message{msg})
	return err
}

// PublishBatch sends msgs in order on one channel and waits for their
// confirms, without waiting in between where that cannot reorder them: n
// messages cost about one round trip, not n. It returns how many leading
// messages were confirmed; err says why the next one was not (the same
// errors as Publish), and nothing after a failed message is sent. A
// message over Config.MaxMessageBytes is never sent: the messages before
// it are, and err is ErrTooLarge.
//
// A message whose routing key has not been confirmed routed lately waits
// for its own confirm before the next is sent: if it comes back unroutable
// (no queue bound yet), a later message with another key must not reach a
// queue before it. Known keys are pipelined. Two cases can still let a
// later message be queued before an earlier one's retry: a queue unbound
// within the last routedFor, and a broker that nacks one message but takes
// the next (an internal error, a reject-publish queue that just got room).
// Consumers see the aggregate version in the headers.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []Message) (int, error) {
	// Checked before dialling: a message that can never be sent says so
	// even while the broker is down.
	var tooLarge error
	for i, msg := range msgs {
		if len(msg.Body) > p.cfg.MaxMessageBytes {
			tooLarge = fmt.Errorf("%w: message %s is %d bytes, over the limit of %d (MaxMessageBytes; keep it at or below RabbitMQ's max_message_size)",
				ErrTooLarge, msg.ID, len(msg.Body), p.cfg.MaxMessageBytes)
			msgs = msgs[:i]
			break
		}
	}
	if len(msgs) == 0 {
		return 0, tooLarge
	}
	sess, err := p.session(ctx)
	if err != nil {
		return 0, err
	}
	pending := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	waited := 0 // confirms taken: pending[:waited]
	// wait takes the confirms of pending[waited:upto]; on a failure it
	// stops there, at the failed message, and returns its error.
	wait := func(upto int) error {
		for ; waited < upto; waited++ {
			err := p.confirm(ctx, sess, msgs[waited], pending[waited])
			sess.noteRoute(msgs[waited].RoutingKey, err == nil)
			if err != nil {
				return err
			}
		}
		return nil
	}
	sendErr := tooLarge
	for _, msg := range msgs {
		barrier := !sess.routes(msg.RoutingKey)
		dc, err := sess.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, msg.RoutingKey, true, false, amqp.Publishing{
			Headers:      msg.Headers,
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			MessageId:    msg.ID,
			Type:         msg.Type,
			Timestamp:    msg.Timestamp,
			Body:         msg.Body,
		})
		if err != nil {
			p.lost(sess)
			sendErr = fmt.Errorf("%w: publish %s: %v", ErrUnavailable, msg.ID, err)
			break
		}
		pending = append(pending, dc)
		if barrier {
			if err := wait(len(pending)); err != nil {
				return waited, err // the barrier itself failed; nothing after it was sent
			}
		}
	}
	if err := wait(len(pending)); err != nil {
		failed := waited
		// Take the later confirms too, so their returns never leak into
		// another publish.
		for i := failed + 1; i < len(pending) && ctx.Err() == nil; i++ {
			_ = p.confirm(ctx, sess, msgs[i], pending[i])
		}
		return failed, err
	}
	return waited, sendErr
}

// confirm waits for the confirm of msg and classifies its outcome.
func (p *Publisher) confirm(ctx context.Context, sess *session, msg Message, dc *amqp.DeferredConfirmation) error {
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		if ctx.Err() != nil {
			// The caller stops waiting, but the message may still reach a
			// queue: close the connection, so that nothing sent on it
			// arrives after the caller moved on (a retry, or another
			// relay taking over the aggregate, would then be overtaken).
			if !p.abandon(sess) {
				return fmt.Errorf("%w: %w: no confirm for %s: %v", ErrUnavailable, ErrUnsettled, msg.ID, ctx.Err())
			}
			return fmt.Errorf("%w: no confirm for %s: %v", ErrUnavailable, msg.ID, ctx.Err())
		}
		p.lost(sess)
		return fmt.Errorf("%w: no confirm for %s: %v", ErrUnavailable, msg.ID, err)
	}
	// The broker sends basic.return before the ack of the same message, and
	// the client delivers both from one reader goroutine in that order, so any
	// return of msg is in sess.returns by now.
	if r, ok := sess.returns.Take(msg.ID); ok {
		return fmt.Errorf("%w: exchange %q, routing key %q: %d %s (bind a queue to it)",
			ErrUnroutable, p.cfg.Exchange, msg.RoutingKey, r.ReplyCode, r.ReplyText)
	}
	if !acked {
		if sess.ch.IsClosed() {
			// The client nacks every pending confirm when the channel or its
			// connection closes: the broker never answered, so the outcome is
			// unknown, not refused, unless the close names this message.
			p.lost(sess)
			return closedBeforeConfirm(msg, sess.closeReason())
		}
		return fmt.Errorf("%w: %s", ErrNacked, msg.ID)
	}
	return nil
}

// refusedSize reads the size RabbitMQ names when it refuses a message over
// its max_message_size: "PRECONDITION_FAILED - message size 20971520 is
// larger than configured max size 16777216".
var refusedSize = regexp.MustCompile(`message size (\d+) is larger than`)

// closedBeforeConfirm is the error of msg, whose confirm was lost because
// the channel closed for reason (nil: closed by the client, or no reason
// known).
//
// A 406 on a publishing channel is the broker refusing one message; every
// message in flight on the channel loses its confirm, before and after the
// refused one. RabbitMQ names the refused message's body size, so a
// message of another size is a bystander: its outcome is unknown and a
// retry is right. A 406 that names no size is taken to be about msg.
// Anything else (320 CONNECTION_FORCED, a lost connection, 404 for a
// deleted exchange) is an outage of the broker, not of the message.
func closedBeforeConfirm(msg Message, reason *amqp.Error) error {
	if reason == nil {
		return fmt.Errorf("%w: %w: channel closed before the confirm of %s", ErrUnavailable, ErrUnsettled, msg.ID)
	}
	why := closeError{reason}
	if !reason.Server {
		// The client gave the connection up (a missed heartbeat, a socket
		// error): the broker may still hold, and later route, what was
		// sent, until it drops the connection itself.
		return fmt.Errorf("%w: %w: channel closed before the confirm of %s: %w", ErrUnavailable, ErrUnsettled, msg.ID, why)
	}
	if reason.Code != amqp.PreconditionFailed {
		return fmt.Errorf("%w: channel closed before the confirm of %s: %w", ErrUnavailable, msg.ID, why)
	}
	if m := refusedSize.FindStringSubmatch(reason.Reason); m != nil {
		if size, err := strconv.Atoi(m[1]); err == nil && size != len(msg.Body) {
			return fmt.Errorf("%w: channel closed before the confirm of %s, the broker refusing another message on it: %w",
				ErrUnavailable, msg.ID, why)
		}
	}
	return fmt.Errorf("%w: %s (%d bytes): %w", ErrRefused, msg.ID, len(msg.Body), why)
}

// closeError reads as the broker wrote it, "406 PRECONDITION_FAILED - …",
// and keeps the *amqp.Error reachable with errors.As.
type closeError struct{ err *amqp.Error }

func (e closeError) Error() string { return fmt.Sprintf("%d %s", e.err.Code, e.err.Reason) }
func (e closeError) Unwrap() error { return e.err }

// Close closes the connection. Safe to call more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.cur != nil {
		err := p.cur.conn.Close()
		p.cur = nil
		if err != nil && !errors.Is(err, amqp.ErrClosed) {
			return fmt.Errorf("broker: close: %w", err)
		}
	}
	return nil
}

func (s *session) usable() bool {
	return !s.ch.IsClosed() && !s.conn.IsClosed()
}

func (p *Publisher) session(ctx context.Context) (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if p.cur != nil && p.cur.usable() {
		return p.cur, nil
	}
	if p.cur != nil && p.cur.channelOnly() {
		// A channel exception closed the channel, not the connection (a
		// 406 for one message): open another channel on it, so one bad
		// message costs the other publishers no redial.
		if sess, err := p.open(p.cur.conn); err == nil {
			p.cur = sess
			return sess, nil
		}
	}
	if p.cur != nil {
		_ = p.cur.conn.Close()
		p.cur = nil
	}

	conn, err := amqp.DialConfig(p.cfg.URL, amqp.Config{
		Dial:       amqp.DefaultDial(p.cfg.DialTimeout),
		Heartbeat:  p.cfg.Heartbeat,
		Properties: amqp.Table{"connection_name": "ferry-publisher"},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", ErrUnavailable, Redact(p.cfg.URL), err)
	}
	sess, err := p.open(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if ctx.Err() != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: dial %s: %v", ErrUnavailable, Redact(p.cfg.URL), ctx.Err())
	}
	p.cur = sess
	return sess, nil
}

// open opens a confirm channel on conn and declares the exchange on it. On
// failure the channel is closed and conn is left to the caller.
func (p *Publisher) open(conn *amqp.Connection) (*session, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("%w: open channel: %v", ErrUnavailable, err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("%w: enable confirms: %v", ErrUnavailable, err)
	}
	sess := &session{
		conn: conn,
		ch:   ch,
		// Buffered so the client's reader goroutine never blocks on it:
		// returns are drained by every Publish after its confirm, so at most
		// one per in-flight publish is waiting here.
		returns: NewReturns(ch.NotifyReturn(make(chan amqp.Return, 4096))),
		// A channel closes once: one slot, so the client never waits on it.
		closes: ch.NotifyClose(make(chan *amqp.Error, 1)),
		routed: map[string]time.Time{},
	}
	if err := ch.ExchangeDeclare(p.cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("broker: declare exchange %q: %w", p.cfg.Exchange, err)
	}
	return sess, nil
}

// lost handles a publish on sess that failed with its channel or its
// connection: a channel closed by a channel exception keeps the connection
// (session opens another channel on it); anything else drops the
// connection, so the next Publish redials.
func (p *Publisher) lost(sess *session) {
	if sess.channelOnly() {
		return
	}
	p.reset(sess)
}

// reset drops sess if it is still the current session, so the next Publish
// redials.
func (p *Publisher) reset(sess *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == sess {
		_ = p.cur.conn.Close()
		p.cur = nil
	}
}

// CloseWait bounds closing the connection after a confirm that did not
// come in time (the caller's context ended first). RabbitMQ handles a
// connection's frames in order, so once its close-ok arrives nothing sent
// on it can still be routed. A caller that must know this before it lets
// another party publish (the publish-first lane, whose lease it guards)
// stops waiting for confirms CloseWait before it must.
const CloseWait = 2 * time.Second

// abandon drops sess like reset, waiting at most CloseWait for the
// broker's close-ok, and reports whether the connection is known closed
// (the close-ok came, or it was closed already).
func (p *Publisher) abandon(sess *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != sess {
		return sess.conn.IsClosed() || sess.settled
	}
	p.cur = nil
	err := sess.conn.CloseDeadline(time.Now().Add(CloseWait))
	sess.settled = err == nil || errors.Is(err, amqp.ErrClosed)
	return sess.settled
}

// Redact hides the password of an AMQP or PostgreSQL URL for logs and errors.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable URL>"
	}
	if u.Scheme == "" || u.Opaque != "" {
		// Not scheme://…: "user:pw@host" parses as scheme "user" with the
		// password in Opaque, and a key=value DSN as a path. There is no
		// telling where a password is, so show nothing.
		return "<URL not shown: not scheme://host/…>"
	}
	if strings.Contains(strings.ToLower(u.RawQuery), "password") {
		// libpq and pgx also take the password as a query parameter. A
		// query that does not parse cleanly may still hold one: hide it all.
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil || !q.Has("password") {
			u.RawQuery = "xxxxx"
		} else {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
	}
	return u.Redacted()
}
