package email

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/mail"
	"strings"
	"text/template"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/internal/pgtext"
	"github.com/ferry-outbox/ferry/relaydb"
)

// Ambiguous-outcome policies.
const (
	// PolicyResend sends again with the same Message-ID (default).
	PolicyResend = "resend"
	// PolicyPark blocks the workflow until an operator decides.
	PolicyPark = "park"
)

// Template renders one kind of message from the event: the payload's
// top-level fields and .Event (id, type, aggregate_type, aggregate_id).
type Template struct {
	Subject string
	Body    string
}

// DefaultTemplates are "confirmation" and "receipt", for orders.
func DefaultTemplates() map[string]Template {
	return map[string]Template{
		"confirmation": {
			Subject: "Your order {{.Event.AggregateID}} is confirmed",
			Body:    "Hello,\n\nthank you for your order {{.Event.AggregateID}}{{with .Payload.amount}} of {{.}}{{end}}{{with .Payload.currency}} {{.}}{{end}}.\n\n-- Ferry demo shop\n",
		},
		"receipt": {
			Subject: "Receipt for order {{.Event.AggregateID}}",
			Body:    "Hello,\n\nwe received your payment for order {{.Event.AggregateID}}.\n\n-- Ferry demo shop\n",
		},
	}
}

// Config configures Activities.
type Config struct {
	// Pool holds the sent-ledger and reads event payloads. Required.
	Pool *pgxpool.Pool
	// SMTPAddress host:port of the SMTP server. Required.
	SMTPAddress string
	// From address. Required.
	From string
	// Timeout of each SMTP step (dial, each command, the reply to the
	// final "."). Default 30s.
	Timeout time.Duration
	// Ambiguous is PolicyResend (default) or PolicyPark.
	Ambiguous string
	// Templates by name (the effect's argument, "email:<name>"). Default
	// DefaultTemplates().
	Templates map[string]Template
	// ToField of the payload holding the recipient. Default "email".
	ToField string
	// MessageIDDomain is the right-hand side of Message-IDs. Default
	// "ferry.local".
	MessageIDDomain string
	// HelloName sent in EHLO. Default "localhost".
	HelloName string
	// Metrics counts sends and ambiguous outcomes; nil counts nothing.
	Metrics *Metrics
}

// Activities are the Email workflow's activities.
type Activities struct {
	cfg      Config
	subjects map[string]*template.Template
	bodies   map[string]*template.Template
}

// NewActivities validates cfg and parses the templates.
func NewActivities(cfg Config) (*Activities, error) {
	cfg.Timeout = cmp.Or(cfg.Timeout, 30*time.Second)
	cfg.Ambiguous = cmp.Or(cfg.Ambiguous, PolicyResend)
	cfg.ToField = cmp.Or(cfg.ToField, "email")
	cfg.MessageIDDomain = cmp.Or(cfg.MessageIDDomain, "ferry.local")
	cfg.HelloName = cmp.Or(cfg.HelloName, "localhost")
	if cfg.Templates == nil {
		cfg.Templates = DefaultTemplates()
	}
	switch {
	case cfg.Pool == nil:
		return nil, errors.New("email: Config.Pool is nil")
	case cfg.SMTPAddress == "":
		return nil, errors.New("email: Config.SMTPAddress is empty")
	case cfg.Ambiguous != PolicyResend && cfg.Ambiguous != PolicyPark:
		return nil, fmt.Errorf("email: Config.Ambiguous %q: use %s or %s", cfg.Ambiguous, PolicyResend, PolicyPark)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("email: Config.Timeout %s must be positive", cfg.Timeout)
	}
	if _, _, err := net.SplitHostPort(cfg.SMTPAddress); err != nil {
		return nil, fmt.Errorf("email: Config.SMTPAddress %q: use host:port", cfg.SMTPAddress)
	}
	if _, err := mail.ParseAddress(cfg.From); err != nil {
		return nil, fmt.Errorf("email: Config.From %q: %w", cfg.From, err)
	}
	a := &Activities{cfg: cfg, subjects: map[string]*template.Template{}, bodies: map[string]*template.Template{}}
	for name, t := range cfg.Templates {
		subj, err := template.New(name).Option("missingkey=zero").Parse(t.Subject)
		if err != nil {
			return nil, fmt.Errorf("email: Config.Templates[%q].Subject: %w", name, err)
		}
		body, err := template.New(name).Option("missingkey=zero").Parse(t.Body)
		if err != nil {
			return nil, fmt.Errorf("email: Config.Templates[%q].Body: %w", name, err)
		}
		a.subjects[name], a.bodies[name] = subj, body
	}
	return a, nil
}

// Policy is the configured ambiguous-outcome policy.
func (a *Activities) Policy() string { return a.cfg.Ambiguous }

// Register registers the activities under their wire names.
func (a *Activities) Register(r worker.Registry) {
	r.RegisterActivityWithOptions(a.SendEmail, activity.RegisterOptions{Name: effects.SendEmailActivity})
	r.RegisterActivityWithOptions(a.ResolveEmail, activity.RegisterOptions{Name: effects.ResolveEmailActivity})
}

// MessageID is the Message-ID of the e-mail sent with key: the same on
// every attempt, and free of personal data.
func MessageID(key, domain string) string {
	sum := sha256.Sum256([]byte(key))
	return "<" + hex.EncodeToString(sum[:16]) + "@" + domain + ">"
}

const sqlEnsureRow = `
INSERT INTO ferry_email_ledger (idempotency_key, message_id, event_id, effect)
VALUES ($1, $2, $3, $4)
ON CONFLICT (idempotency_key) DO NOTHING`

const sqlLockRow = `
SELECT status, claimed_until < now(), attempts, ambiguous, coalesce(last_reply, '')
FROM ferry_email_ledger WHERE idempotency_key = $1 FOR UPDATE`

// sqlClaim starts a transaction: claimed_until is a lease, so a worker
// that dies mid-send leaves a row that the next attempt recognises as
// ambiguous (and a live one keeps a concurrent attempt out).
const sqlClaim = `
UPDATE ferry_email_ledger
SET status = 'sending', attempts = attempts + 1, ambiguous = ambiguous + $2,
    claimed_until = now() + $3::interval, updated_at = now()
WHERE idempotency_key = $1
RETURNING attempts, ambiguous`

const sqlMarkAmbiguous = `
UPDATE ferry_email_ledger
SET status = 'ambiguous', ambiguous = ambiguous + $2, claimed_until = NULL, updated_at = now()
WHERE idempotency_key = $1
RETURNING attempts, ambiguous`

const sqlSettle = `
UPDATE ferry_email_ledger
SET status = $2, last_reply = $3, claimed_until = NULL, updated_at = now(),
    sent_at = CASE WHEN $2 = 'sent' THEN now() ELSE sent_at END
WHERE idempotency_key = $1
RETURNING attempts, ambiguous`

const sqlResolve = `
UPDATE ferry_email_ledger
SET status = $2, resolved_by = $3, last_reply = $4, claimed_until = NULL, updated_at = now()
WHERE idempotency_key = $1
RETURNING message_id, attempts, ambiguous`

// SendEmail sends the message of req once per key. The ledger decides
// first: sent means nothing is sent again; a transaction that was running
// when its worker died, or whose connection dropped after the final ".",
// is ambiguous and the policy applies.
func (a *Activities) SendEmail(ctx context.Context, req effects.EmailRequest) (effects.EmailResult, error) {
	msgID := MessageID(req.Key, a.cfg.MessageIDDomain)
	res := effects.EmailResult{Key: req.Key, MessageID: msgID}
	to, msg, err := a.render(ctx, req, msgID)
	if err != nil {
		return res, err
	}
	if _, err := a.cfg.Pool.Exec(ctx, sqlEnsureRow, req.Key, msgID, req.Event.ID, req.Effect); err != nil {
		return res, fmt.Errorf("ledger row for %s: %w", req.Key, err)
	}

	send, resend, err := a.claim(ctx, req, &res)
	if err != nil || !send {
		return res, err
	}

	reply, outcome, sendErr := a.transact(ctx, to, msg)
	a.cfg.Metrics.outcome(outcome)
	// Detached: the ledger must learn what happened even when the
	// activity's context is what ended the transaction.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch outcome {
	case outcomeSent:
		if err := a.settle(sctx, req.Key, "sent", reply, &res); err != nil {
			return res, err
		}
		if resend {
			a.cfg.Metrics.resend()
		}
		res.Status, res.Reply = effects.EmailSent, reply
		return res, nil
	case outcomeRejected:
		if err := a.settle(sctx, req.Key, "rejected", reply, &res); err != nil {
			return res, err
		}
		res.Status, res.Reply = effects.EmailRejected, reply
		return res, temporal.NewNonRetryableApplicationError(sendErr.Error(), effects.ErrTypeEmailRejected, sendErr, res)
	case outcomeAmbiguous:
		a.cfg.Metrics.ambiguousSend()
		if err := a.cfg.Pool.QueryRow(sctx, sqlMarkAmbiguous, req.Key, 1).Scan(&res.Attempts, &res.Ambiguous); err != nil {
			return res, fmt.Errorf("ledger: mark %s ambiguous: %w", req.Key, err)
		}
		activity.GetLogger(ctx).Warn("e-mail delivery ambiguous (connection lost after the final '.')",
			"key", req.Key, "message_id", msgID, "policy", a.cfg.Ambiguous, "error", sendErr)
		return res, a.ambiguousError(sendErr)
	default: // not sent: nothing was accepted
		if err := a.settle(sctx, req.Key, "pending", reply, &res); err != nil {
			return res, err
		}
		return res, temporal.NewApplicationErrorWithCause(sendErr.Error(), effects.ErrTypeNotSent, sendErr)
	}
}

// claim decides from the ledger whether to send, and claims the row if so.
func (a *Activities) claim(ctx context.Context, req effects.EmailRequest, res *effects.EmailResult) (send, resend bool, err error) {
	err = pgx.BeginFunc(ctx, a.cfg.Pool, func(tx pgx.Tx) error {
		var status, reply string
		var expired *bool
		if err := tx.QueryRow(ctx, sqlLockRow, req.Key).Scan(&status, &expired, &res.Attempts, &res.Ambiguous, &reply); err != nil {
			return fmt.Errorf("ledger: read %s: %w", req.Key, err)
		}
		newAmbiguous := 0
		switch status {
		case "sent", "marked_sent":
			a.cfg.Metrics.ledgerStopped()
			res.Status, res.Reply = effects.EmailAlreadySent, reply
			return nil
		case "rejected", "marked_failed":
			res.Status, res.Reply = effects.EmailRejected, reply
			if status == "marked_failed" {
				res.Status = effects.EmailMarkedFailed
				return nil
			}
			return temporal.NewNonRetryableApplicationError("rejected before: "+reply, effects.ErrTypeEmailRejected, nil, *res)
		case "sending":
			if expired == nil || !*expired {
				return temporal.NewApplicationError("another attempt is sending this e-mail", effects.ErrTypeInProgress)
			}
			// The attempt that claimed it died mid-transaction: whether
			// the server accepted is unknown.
			a.cfg.Metrics.ambiguousSend()
			newAmbiguous = 1
			resend = true
		case "ambiguous":
			resend = true
		}
		if resend && a.cfg.Ambiguous == PolicyPark && !req.Resend {
			if err := tx.QueryRow(ctx, sqlMarkAmbiguous, req.Key, newAmbiguous).Scan(&res.Attempts, &res.Ambiguous); err != nil {
				return fmt.Errorf("ledger: park %s: %w", req.Key, err)
			}
			return nil
		}
		lease := fmt.Sprintf("%d milliseconds", (4*a.cfg.Timeout + 10*time.Second).Milliseconds())
		if err := tx.QueryRow(ctx, sqlClaim, req.Key, newAmbiguous, lease).Scan(&res.Attempts, &res.Ambiguous); err != nil {
			return fmt.Errorf("ledger: claim %s: %w", req.Key, err)
		}
		send = true
		return nil
	})
	if err != nil {
		return false, false, err
	}
	if !send && res.Status == "" {
		// Parked (committed above): the operator decides.
		return false, false, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("e-mail %s: last transaction ambiguous; policy park: waiting for an operator", req.Key), effects.ErrTypeEmailParked, nil)
	}
	return send, resend, nil
}

func (a *Activities) ambiguousError(cause error) error {
	msg := "connection lost after the final '.': the server may have accepted the message"
	if a.cfg.Ambiguous == PolicyPark {
		return temporal.NewNonRetryableApplicationError(msg+"; policy park: waiting for an operator", effects.ErrTypeEmailParked, cause)
	}
	return temporal.NewApplicationErrorWithCause(msg+"; policy resend: sending again with the same Message-ID", effects.ErrTypeEmailAmbiguous, cause)
}

func (a *Activities) settle(ctx context.Context, key, status, reply string, res *effects.EmailResult) error {
	if err := a.cfg.Pool.QueryRow(ctx, sqlSettle, key, status, pgtext.Truncate(reply, 500)).Scan(&res.Attempts, &res.Ambiguous); err != nil {
		return fmt.Errorf("ledger: mark %s %s: %w", key, status, err)
	}
	return nil
}

// ResolveEmail records an operator's decision about an ambiguous send,
// which settles the unknown outcome: it counts as reconciled.
func (a *Activities) ResolveEmail(ctx context.Context, in effects.EmailResolveInput) (effects.EmailResult, error) {
	res := effects.EmailResult{Key: in.Key, Status: in.Status}
	status := "marked_sent"
	if in.Status == effects.EmailMarkedFailed {
		status = "marked_failed"
	}
	err := a.cfg.Pool.QueryRow(ctx, sqlResolve, in.Key, status, in.Actor, pgtext.Truncate("operator: "+in.Reason, 500)).
		Scan(&res.MessageID, &res.Attempts, &res.Ambiguous)
	if err != nil {
		return res, fmt.Errorf("ledger: resolve %s: %w", in.Key, err)
	}
	a.cfg.Metrics.outcome(effects.OutcomeReconciled)
	return res, nil
}

// render builds the message; an event that cannot make one is
// ErrTypeInvalidEvent.
func (a *Activities) render(ctx context.Context, req effects.EmailRequest, msgID string) (string, []byte, error) {
	subj, ok := a.subjects[req.Template]
	if !ok {
		return "", nil, invalid("e-mail template %q is not configured", req.Template)
	}
	raw, err := relaydb.Payload(ctx, a.cfg.Pool, req.Event.ID)
	switch {
	case errors.Is(err, relaydb.ErrEventNotFound):
		return "", nil, invalid("event %s is not in outbox_events", req.Event.ID)
	case err != nil:
		return "", nil, err
	}
	var payload map[string]any
	if err := json.Unmarshal(raw, &payload); err != nil {
		return "", nil, invalid("event %s: payload is not a JSON object", req.Event.ID)
	}
	toStr, _ := payload[a.cfg.ToField].(string)
	to, err := mail.ParseAddress(toStr)
	if err != nil {
		return "", nil, invalid("event %s: payload field %q is not an e-mail address", req.Event.ID, a.cfg.ToField)
	}
	data := map[string]any{"Payload": payload, "Event": req.Event}
	var subject, body bytes.Buffer
	if err := subj.Execute(&subject, data); err != nil {
		return "", nil, invalid("template %q subject: %v", req.Template, err)
	}
	if err := a.bodies[req.Template].Execute(&body, data); err != nil {
		return "", nil, invalid("template %q body: %v", req.Template, err)
	}
	var m bytes.Buffer
	fmt.Fprintf(&m, "From: %s\r\n", a.cfg.From)
	fmt.Fprintf(&m, "To: %s\r\n", to.String())
	fmt.Fprintf(&m, "Subject: %s\r\n", mime.QEncoding.Encode("utf-8", strings.TrimSpace(subject.String())))
	fmt.Fprintf(&m, "Message-ID: %s\r\n", msgID)
	fmt.Fprintf(&m, "Date: %s\r\n", time.Now().UTC().Format(time.RFC1123Z))
	fmt.Fprintf(&m, "Ferry-Idempotency-Key: %s\r\n", req.Key)
	m.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n")
	m.WriteString(strings.ReplaceAll(strings.ReplaceAll(body.String(), "\r\n", "\n"), "\n", "\r\n"))
	return to.Address, m.Bytes(), nil
}

const (
	outcomeSent      = "sent"
	outcomeRejected  = "rejected"
	outcomeAmbiguous = "ambiguous"
	outcomeNotSent   = "not_sent"
)

// transact runs one SMTP transaction. Anything that fails before the final
// "." is not sent (the server cannot have accepted); a 4xx at any point is
// not sent either, a 5xx is rejected; losing the connection while waiting
// for the reply to the final "." is ambiguous.
func (a *Activities) transact(ctx context.Context, to string, msg []byte) (reply, outcome string, err error) {
	// The whole transaction fits in the ledger's lease (see claim).
	ctx, cancel := context.WithTimeout(ctx, 4*a.cfg.Timeout)
	defer cancel()
	d := net.Dialer{Timeout: a.cfg.Timeout}
	conn, err := d.DialContext(ctx, "tcp", a.cfg.SMTPAddress)
	if err != nil {
		return "", outcomeNotSent, fmt.Errorf("dial SMTP %s: %w", a.cfg.SMTPAddress, err)
	}
	c := smtp.NewClient(conn)
	c.CommandTimeout, c.SubmissionTimeout = a.cfg.Timeout, a.cfg.Timeout
	defer c.Close()
	// The activity's cancellation (worker stop, heartbeat timeout) ends
	// the transaction; the outcome is then classified like a drop.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	classify := func(step string, err error) (string, string, error) {
		var se *smtp.SMTPError
		if errors.As(err, &se) {
			if se.Code >= 500 {
				return se.Error(), outcomeRejected, fmt.Errorf("SMTP %s: %w", step, err)
			}
			return se.Error(), outcomeNotSent, fmt.Errorf("SMTP %s: %w", step, err)
		}
		return "", outcomeNotSent, fmt.Errorf("SMTP %s: %w", step, err)
	}
	if err := c.Hello(a.cfg.HelloName); err != nil {
		return classify("EHLO", err)
	}
	if err := c.Mail(a.cfg.From, nil); err != nil {
		return classify("MAIL FROM", err)
	}
	if err := c.Rcpt(to, nil); err != nil {
		return classify("RCPT TO", err)
	}
	w, err := c.Data()
	if err != nil {
		return classify("DATA", err)
	}
	if _, err := w.Write(msg); err != nil {
		return classify("message", err)
	}
	resp, err := w.CloseWithResponse()
	if err != nil {
		var se *smtp.SMTPError
		if errors.As(err, &se) {
			return classify("end of DATA", err)
		}
		// RFC 1047: the final "." may have arrived and been acted on.
		return "", outcomeAmbiguous, fmt.Errorf("SMTP end of DATA: %w", err)
	}
	_ = c.Quit()
	return "250 " + resp.StatusText, outcomeSent, nil
}

func invalid(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), effects.ErrTypeInvalidEvent, nil)
}
