package cli

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/redact"
)

func TestRedactLastError(t *testing.T) {
	t.Parallel()
	red, err := redact.New([]string{"order.created:email"})
	require.NoError(t, err)
	payload := `{"email":"ann@example.com","sku":"A-1"}`
	cases := []struct {
		name      string
		red       *redact.Redactor
		eventType string
		payload   *string
		lastErr   string
		want      string
	}{
		{"a quoted value", red, "created", &payload, "quarantined (Unroutable): no route for ann@example.com", "quarantined (Unroutable): no route for [redacted]"},
		{"a blanked payload leaves fragments", red, "created", nil, `quarantined (X): {"email":"ann@example.com"}`, `quarantined (X): {"email":"[redacted]"}`},
		{"another event type", red, "paid", &payload, "no route for ann@example.com", "no route for ann@example.com"},
		{"redaction off", nil, "created", &payload, "no route for ann@example.com", "no route for ann@example.com"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, redactLastError(tc.red, "order", tc.eventType, tc.payload, tc.lastErr))
		})
	}
}

// Not parallel: the flags read FERRY_* variables when they are defined.
func TestCodecKeyFlags(t *testing.T) {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	key := base64.StdEncoding.EncodeToString(b)
	t.Setenv("FERRY_CODEC_KEY", "k1:"+key)

	var out, errOut bytes.Buffer
	require.Equal(t, 0, Main([]string{"--help"}, &out, &errOut, nil))
	require.Contains(t, out.String(), "--codec-key")
	require.Contains(t, out.String(), "--sensitive-field")
	require.NotContains(t, out.String(), key[:16], "--help never shows a key")

	out.Reset()
	errOut.Reset()
	require.Equal(t, 1, Main([]string{"migrate", "--codec-key", "k2:not-a-key"}, &out, &errOut, nil))
	require.Contains(t, errOut.String(), "--codec-key (FERRY_CODEC_KEY), key 1: invalid codec key: not base64")
	require.NotContains(t, errOut.String(), "not-a-key")

	out.Reset()
	errOut.Reset()
	require.Equal(t, 1, Main([]string{"migrate", "--sensitive-field", "order:email"}, &out, &errOut, nil))
	require.Contains(t, errOut.String(), "--sensitive-field (FERRY_SENSITIVE_FIELDS)")
}

func TestCodecServerNeedsAKey(t *testing.T) {
	t.Setenv("FERRY_CODEC_KEY", "")
	var out, errOut bytes.Buffer
	require.Equal(t, 1, Main([]string{"codec-server"}, &out, &errOut, nil))
	require.Contains(t, errOut.String(), "no codec key: set --codec-key")
}

// The error the command exits with passes the sensitive fields' mask too:
// a database or validation error can quote a payload.
func TestExitErrorIsMasked(t *testing.T) {
	t.Parallel()
	root, g := newRoot(&bytes.Buffer{}, &bytes.Buffer{}, nil)
	require.NoError(t, root.PersistentFlags().Parse([]string{"--sensitive-field", "email"}))
	err := errors.New(`patch rejected: {"email": "ann@example.com", "sku": "A-1"} email=ann@example.com`)
	require.Equal(t, `patch rejected: {"email": "[redacted]", "sku": "A-1"} email=[redacted]`, g.maskError(err))

	_, off := newRoot(&bytes.Buffer{}, &bytes.Buffer{}, nil)
	require.Equal(t, err.Error(), off.maskError(err), "no sensitive field named: unchanged")
}
