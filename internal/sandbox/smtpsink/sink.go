package smtpsink

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/mail"
	"slices"
	"sync"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/ferry-outbox/ferry/internal/sandbox/internal/serve"
)

// Fault is what the sink does wrong with one message.
type Fault int

// Faults, applied after the message's final ".".
const (
	FaultNone Fault = iota
	// FaultTempFail answers 451: not accepted, try again later.
	FaultTempFail
	// FaultPermFail answers 554: refused for good.
	FaultPermFail
	// FaultDropAfterData records the message, then closes the connection
	// without replying.
	FaultDropAfterData
)

func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultTempFail:
		return "451"
	case FaultPermFail:
		return "554"
	case FaultDropAfterData:
		return "drop-after-data"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Message is one accepted message.
type Message struct {
	From      string
	To        []string
	MessageID string
	Subject   string
	Data      []byte
	Received  time.Time
}

// Attempt is what a Faults function sees of a message.
type Attempt struct {
	MessageID string
	// Seen is how many transactions with this Message-ID reached the end
	// of DATA before.
	Seen int
}

// Config configures a Server.
type Config struct {
	// Addr to listen on. Default "127.0.0.1:0" (a free port).
	Addr string
	// Domain in the greeting. Default "sink.ferry.local".
	Domain string
	// Faults picks a fault per message. Default: none. Change it later
	// with SetFaults.
	Faults func(Attempt) Fault
}

// Server is the SMTP sink.
type Server struct {
	cfg  Config
	srv  *smtp.Server
	loop serve.Loop

	mu       sync.Mutex
	faults   func(Attempt) Fault
	messages []Message
	seen     map[string]int
	injected map[Fault]int
}

// New validates cfg.
func New(cfg Config) (*Server, error) {
	cfg.Addr = cmp.Or(cfg.Addr, "127.0.0.1:0")
	cfg.Domain = cmp.Or(cfg.Domain, "sink.ferry.local")
	s := &Server{loop: serve.Loop{Name: "smtpsink"}, cfg: cfg, faults: cfg.Faults, seen: map[string]int{}, injected: map[Fault]int{}}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &session{s: s, conn: c}, nil
	}))
	srv.Domain = cfg.Domain
	srv.ReadTimeout = time.Minute
	srv.WriteTimeout = time.Minute
	srv.MaxMessageBytes = 1 << 20
	srv.MaxRecipients = 50
	srv.ErrorLog = log.New(io.Discard, "", 0)
	s.srv = srv
	return s, nil
}

// Start listens and serves in the background.
func (s *Server) Start(ctx context.Context) error {
	return s.loop.Start(ctx, s.cfg.Addr, s.srv.Serve)
}

// Stop closes the listener and every connection and waits. Safe to call
// twice.
func (s *Server) Stop() {
	s.loop.Stop(func() { _ = s.srv.Close() })
}

// Addr is host:port.
func (s *Server) Addr() string { return s.loop.Addr() }

// SetFaults replaces the fault function (nil: none).
func (s *Server) SetFaults(f func(Attempt) Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Messages returns the accepted messages in order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.messages)
}

// ByMessageID counts accepted messages per Message-ID: more than one is a
// duplicate delivery.
func (s *Server) ByMessageID() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, m := range s.messages {
		out[m.MessageID]++
	}
	return out
}

// Injected counts the faults injected so far, by kind.
func (s *Server) Injected() map[Fault]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.injected)
}

type session struct {
	s    *Server
	conn *smtp.Conn
	from string
	to   []string
}

func (ss *session) Reset()        { ss.from, ss.to = "", nil }
func (ss *session) Logout() error { return nil }

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	msg := Message{From: ss.from, To: slices.Clone(ss.to), Data: data, Received: time.Now()}
	if m, err := mail.ReadMessage(bytes.NewReader(data)); err == nil {
		msg.MessageID = m.Header.Get("Message-Id")
		msg.Subject = m.Header.Get("Subject")
	}
	s := ss.s
	s.mu.Lock()
	att := Attempt{MessageID: msg.MessageID, Seen: s.seen[msg.MessageID]}
	s.seen[msg.MessageID]++
	fault := FaultNone
	if s.faults != nil {
		fault = s.faults(att)
	}
	if fault != FaultNone {
		s.injected[fault]++
	}
	if fault == FaultNone || fault == FaultDropAfterData {
		s.messages = append(s.messages, msg)
	}
	s.mu.Unlock()

	switch fault {
	case FaultTempFail:
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "sandbox: try again later"}
	case FaultPermFail:
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "sandbox: message refused"}
	case FaultDropAfterData:
		// Accepted, and the reply never leaves.
		_ = ss.conn.Conn().Close()
		return errors.New("sandbox: connection dropped after DATA")
	}
	return nil
}
