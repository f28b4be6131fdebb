package email_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/ferry-outbox/ferry/effects"
	"github.com/ferry-outbox/ferry/effects/email"
	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/internal/sandbox/smtpsink"
	"github.com/ferry-outbox/ferry/outbox"
)

type bundle struct {
	db   *ferrytest.DB
	sink *smtpsink.Server
	acts *email.Activities
	env  *testsuite.TestActivityEnvironment
	reg  *prometheus.Registry // the activities' metrics
}

// setup: a fresh schema with Ferry's migrations (the ledger included), an
// SMTP sink on loopback, and the activities under policy, counting into a
// registry of their own.
func setup(t *testing.T, policy string) *bundle {
	t.Helper()
	db := ferrytest.NewDB(t, "")
	sink, err := smtpsink.New(smtpsink.Config{})
	require.NoError(t, err)
	require.NoError(t, sink.Start(context.Background()))
	t.Cleanup(sink.Stop)
	reg := prometheus.NewRegistry()
	m, err := email.NewMetrics(reg)
	require.NoError(t, err)
	acts, err := email.NewActivities(email.Config{Pool: db.Pool, SMTPAddress: sink.Addr(), From: "shop@example.com", Ambiguous: policy, Metrics: m})
	require.NoError(t, err)
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(acts.SendEmail, activity.RegisterOptions{Name: effects.SendEmailActivity})
	env.RegisterActivityWithOptions(acts.ResolveEmail, activity.RegisterOptions{Name: effects.ResolveEmailActivity})
	return &bundle{db: db, sink: sink, acts: acts, env: env, reg: reg}
}

// event commits an order.created event and returns the e-mail request for
// its confirmation.
func (b *bundle) event(t *testing.T, payload string) effects.EmailRequest {
	t.Helper()
	w, err := outbox.NewWriter(outbox.Config{})
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	require.NoError(t, pgx.BeginFunc(context.Background(), b.db.Pool, func(tx pgx.Tx) error {
		_, err := w.Write(context.Background(), tx, outbox.Event{ID: id, AggregateType: "order", AggregateID: "o1", EventType: "created", Payload: []byte(payload)})
		return err
	}))
	return effects.EmailRequest{
		Key: effects.IdempotencyKey("email:confirmation", id.String(), "send"), Effect: "email:confirmation", Template: "confirmation",
		Event: effects.EffectEvent{ID: id.String(), Type: "created", AggregateType: "order", AggregateID: "o1"},
	}
}

const payload = `{"email": "ada@example.com", "amount": 4200, "currency": "eur"}`

func (b *bundle) send(req effects.EmailRequest) (effects.EmailResult, error) {
	v, err := b.env.ExecuteActivity(effects.SendEmailActivity, req)
	if err != nil {
		return effects.EmailResult{}, err
	}
	var res effects.EmailResult
	return res, v.Get(&res)
}

func errType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

// outcomes are ferry_effect_outcomes_total{kind="email"} by outcome.
// (testutil reads values only from a collector, and email.Metrics keeps
// its vectors to itself.)
func (b *bundle) outcomes(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := b.reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "ferry_effect_outcomes_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			require.Equal(t, effects.KindEmail, labels["kind"])
			got[labels["outcome"]] = s.GetCounter().GetValue()
		}
	}
	return got
}

func (b *bundle) ledger(t *testing.T, key string) (status string, attempts, ambiguous int) {
	t.Helper()
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT status, attempts, ambiguous FROM ferry_email_ledger WHERE idempotency_key = $1`, key).Scan(&status, &attempts, &ambiguous))
	return status, attempts, ambiguous
}

func TestRetryAfterConfirmedSendDoesNotResend(t *testing.T) {
	t.Parallel()
	b := setup(t, email.PolicyResend)
	req := b.event(t, payload)
	res, err := b.send(req)
	require.NoError(t, err)
	require.Equal(t, effects.EmailSent, res.Status)
	require.Equal(t, email.MessageID(req.Key, "ferry.local"), res.MessageID)

	again, err := b.send(req)
	require.NoError(t, err)
	require.Equal(t, effects.EmailAlreadySent, again.Status)

	msgs := b.sink.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, res.MessageID, msgs[0].MessageID)
	require.Equal(t, []string{"ada@example.com"}, msgs[0].To)
	require.Contains(t, msgs[0].Subject, "o1")
	require.Contains(t, string(msgs[0].Data), "4200")
	status, attempts, ambiguous := b.ledger(t, req.Key)
	require.Equal(t, "sent", status)
	require.Equal(t, 1, attempts)
	require.Zero(t, ambiguous)
}

// A drop after the final ".": the sink has the message, the client cannot
// know. Resend policy: the next attempt sends it again with the same
// Message-ID, one duplicate for one ambiguous drop.
func TestDropAfterDataResendsWithSameMessageID(t *testing.T) {
	t.Parallel()
	b := setup(t, email.PolicyResend)
	b.sink.SetFaults(func(a smtpsink.Attempt) smtpsink.Fault {
		if a.Seen == 0 {
			return smtpsink.FaultDropAfterData
		}
		return smtpsink.FaultNone
	})
	req := b.event(t, payload)
	_, err := b.send(req)
	require.Equal(t, effects.ErrTypeEmailAmbiguous, errType(err), "%v", err)
	status, _, ambiguous := b.ledger(t, req.Key)
	require.Equal(t, "ambiguous", status)
	require.Equal(t, 1, ambiguous)

	res, err := b.send(req)
	require.NoError(t, err)
	require.Equal(t, effects.EmailSent, res.Status)
	require.Equal(t, 2, res.Attempts)
	require.Equal(t, 1, res.Ambiguous)
	require.Equal(t, map[string]int{res.MessageID: 2}, b.sink.ByMessageID())
	require.Equal(t, 1, b.sink.Injected()[smtpsink.FaultDropAfterData])
}

func TestPolicyParkSendsNothingUntilAskedTo(t *testing.T) {
	t.Parallel()
	b := setup(t, email.PolicyPark)
	b.sink.SetFaults(func(a smtpsink.Attempt) smtpsink.Fault {
		if a.Seen == 0 {
			return smtpsink.FaultDropAfterData
		}
		return smtpsink.FaultNone
	})
	req := b.event(t, payload)
	_, err := b.send(req)
	require.Equal(t, effects.ErrTypeEmailParked, errType(err), "%v", err)
	_, err = b.send(req)
	require.Equal(t, effects.ErrTypeEmailParked, errType(err), "a retry stays parked: %v", err)
	require.Len(t, b.sink.Messages(), 1)

	req.Resend = true
	res, err := b.send(req)
	require.NoError(t, err)
	require.Equal(t, effects.EmailSent, res.Status)
	require.Len(t, b.sink.Messages(), 2)
}

func TestTemporaryFailureIsRetriedPermanentIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t, email.PolicyResend)
	b.sink.SetFaults(func(a smtpsink.Attempt) smtpsink.Fault {
		if a.Seen == 0 {
			return smtpsink.FaultTempFail
		}
		return smtpsink.FaultNone
	})
	req := b.event(t, payload)
	_, err := b.send(req)
	require.Equal(t, effects.ErrTypeNotSent, errType(err), "%v", err)
	res, err := b.send(req)
	require.NoError(t, err)
	require.Equal(t, effects.EmailSent, res.Status)
	require.Len(t, b.sink.Messages(), 1)

	b.sink.SetFaults(func(smtpsink.Attempt) smtpsink.Fault { return smtpsink.FaultPermFail })
	req2 := b.event(t, payload)
	_, err = b.send(req2)
	require.Equal(t, effects.ErrTypeEmailRejected, errType(err), "%v", err)
	_, err = b.send(req2)
	require.Equal(t, effects.ErrTypeEmailRejected, errType(err), "rejected stays rejected without sending: %v", err)
	require.Equal(t, 1, b.sink.Injected()[smtpsink.FaultPermFail])
	status, _, _ := b.ledger(t, req2.Key)
	require.Equal(t, "rejected", status)
}

// A worker that died mid-transaction leaves a claimed row; once its lease
// has run out the next attempt counts it ambiguous and (resend policy)
// sends.
func TestExpiredClaimIsAmbiguous(t *testing.T) {
	t.Parallel()
	b := setup(t, email.PolicyResend)
	req := b.event(t, payload)
	_, err := b.db.Pool.Exec(context.Background(), `
		INSERT INTO ferry_email_ledger (idempotency_key, message_id, event_id, effect, status, attempts, claimed_until)
		VALUES ($1, $2, $3, $4, 'sending', 1, now() - interval '1 second')`,
		req.Key, email.MessageID(req.Key, "ferry.local"), req.Event.ID, req.Effect)
	require.NoError(t, err)
	res, err := b.send(req)
	require.NoError(t, err)
	require.Equal(t, effects.EmailSent, res.Status)
	require.Equal(t, 2, res.Attempts)
	require.Equal(t, 1, res.Ambiguous)

	// A live claim keeps a concurrent attempt out.
	req2 := b.event(t, payload)
	_, err = b.db.Pool.Exec(context.Background(), `
		INSERT INTO ferry_email_ledger (idempotency_key, message_id, event_id, effect, status, attempts, claimed_until)
		VALUES ($1, $2, $3, $4, 'sending', 1, now() + interval '1 minute')`,
		req2.Key, email.MessageID(req2.Key, "ferry.local"), req2.Event.ID, req2.Effect)
	require.NoError(t, err)
	_, err = b.send(req2)
	require.Equal(t, effects.ErrTypeInProgress, errType(err), "%v", err)
	require.Len(t, b.sink.Messages(), 1)
}

func TestEventWithoutAddressIsInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, email.PolicyResend)
	_, err := b.send(b.event(t, `{"amount": 1}`))
	require.Equal(t, effects.ErrTypeInvalidEvent, errType(err), "%v", err)
	req := b.event(t, payload)
	req.Template = "nope"
	_, err = b.send(req)
	require.Equal(t, effects.ErrTypeInvalidEvent, errType(err), "%v", err)
	require.Empty(t, b.sink.Messages())
}

func TestResolveEmail(t *testing.T) {
	t.Parallel()
	b := setup(t, email.PolicyPark)
	b.sink.SetFaults(func(smtpsink.Attempt) smtpsink.Fault { return smtpsink.FaultDropAfterData })
	req := b.event(t, payload)
	_, err := b.send(req)
	require.Equal(t, effects.ErrTypeEmailParked, errType(err))
	v, err := b.env.ExecuteActivity(effects.ResolveEmailActivity, effects.EmailResolveInput{Key: req.Key, Status: effects.EmailMarkedSent, Actor: "ops", Reason: "customer has it"})
	require.NoError(t, err)
	var res effects.EmailResult
	require.NoError(t, v.Get(&res))
	require.Equal(t, effects.EmailMarkedSent, res.Status)
	again, err := b.send(req)
	require.NoError(t, err)
	require.Equal(t, effects.EmailAlreadySent, again.Status)
	require.Len(t, b.sink.Messages(), 1)
	// The ambiguous drop counts as unknown, the operator's decision as
	// its reconciliation; nothing counts as sent.
	require.Equal(t, map[string]float64{"ambiguous": 1, "reconciled": 1}, b.outcomes(t))
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	db := ferrytest.NewDB(t, "")
	for name, cfg := range map[string]email.Config{
		"no pool":    {SMTPAddress: "127.0.0.1:25", From: "a@b.c"},
		"no address": {Pool: db.Pool, From: "a@b.c"},
		"bad from":   {Pool: db.Pool, SMTPAddress: "127.0.0.1:25", From: "nobody"},
		"bad policy": {Pool: db.Pool, SMTPAddress: "127.0.0.1:25", From: "a@b.c", Ambiguous: "maybe"},
		"bad tmpl":   {Pool: db.Pool, SMTPAddress: "127.0.0.1:25", From: "a@b.c", Templates: map[string]email.Template{"x": {Subject: "{{"}}},
	} {
		_, err := email.NewActivities(cfg)
		require.Error(t, err, name)
		require.True(t, strings.HasPrefix(err.Error(), "email: Config."), "%s: %v", name, err)
	}
}
