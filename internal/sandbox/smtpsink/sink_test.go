package smtpsink_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/internal/sandbox/smtpsink"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func send(addr, msgID string) error {
	msg := "From: a@example.com\r\nTo: b@example.com\r\nSubject: hi\r\nMessage-ID: " + msgID + "\r\n\r\nbody\r\n"
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Mail("a@example.com", nil); err != nil {
		return err
	}
	if err := c.Rcpt("b@example.com", nil); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, strings.NewReader(msg)); err != nil {
		return err
	}
	return w.Close()
}

func TestSinkRecordsAndInjects(t *testing.T) {
	t.Parallel()
	s, err := smtpsink.New(smtpsink.Config{Faults: func(a smtpsink.Attempt) smtpsink.Fault {
		switch a.MessageID {
		case "<temp@x>":
			return smtpsink.FaultTempFail
		case "<perm@x>":
			return smtpsink.FaultPermFail
		case "<drop@x>":
			if a.Seen == 0 {
				return smtpsink.FaultDropAfterData
			}
		}
		return smtpsink.FaultNone
	}})
	require.NoError(t, err)
	require.NoError(t, s.Start(context.Background()))
	defer s.Stop()

	require.NoError(t, send(s.Addr(), "<ok@x>"))
	var se *smtp.SMTPError
	require.ErrorAs(t, send(s.Addr(), "<temp@x>"), &se)
	require.Equal(t, 451, se.Code)
	require.ErrorAs(t, send(s.Addr(), "<perm@x>"), &se)
	require.Equal(t, 554, se.Code)
	err = send(s.Addr(), "<drop@x>")
	require.Error(t, err)
	require.False(t, isSMTPError(err), "a drop has no reply: %v", err)
	require.NoError(t, send(s.Addr(), "<drop@x>"))

	require.Equal(t, map[string]int{"<ok@x>": 1, "<drop@x>": 2}, s.ByMessageID(), "a dropped message was accepted; refused ones were not")
	require.Equal(t, map[smtpsink.Fault]int{smtpsink.FaultTempFail: 1, smtpsink.FaultPermFail: 1, smtpsink.FaultDropAfterData: 1}, s.Injected())
	m := s.Messages()[0]
	require.Equal(t, "a@example.com", m.From)
	require.Equal(t, []string{"b@example.com"}, m.To)
	require.Equal(t, "hi", m.Subject)
	s.Stop()
	s.Stop()
}

func isSMTPError(err error) bool {
	_, ok := err.(*smtp.SMTPError)
	return ok
}
