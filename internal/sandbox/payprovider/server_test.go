package payprovider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ferry-outbox/ferry/internal/sandbox/payprovider"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func setup(t *testing.T) *payprovider.Server {
	t.Helper()
	s, err := payprovider.New(payprovider.Config{SlowDelay: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	return s
}

func post(t *testing.T, url, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// The ledger is readable over HTTP, in the order things were recorded.
func TestLedgerOverHTTP(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.Equal(t, http.StatusOK, post(t, s.URL()+"/v1/charges", "k1", `{"amount":100,"currency":"eur","reference":"order/1"}`).StatusCode)
	require.Equal(t, http.StatusPaymentRequired, post(t, s.URL()+"/v1/charges", "k2", `{"amount":2000000,"currency":"eur","reference":"order/2"}`).StatusCode)
	require.Equal(t, http.StatusBadRequest, post(t, s.URL()+"/v1/charges", "", `{"amount":100,"currency":"eur"}`).StatusCode, "no key")
	require.Equal(t, http.StatusBadRequest, post(t, s.URL()+"/v1/charges", "k3", `{"amount":100,"currency":"eur","color":"red"}`).StatusCode, "unknown field")

	resp, err := http.Get(s.URL() + "/v1/ledger")
	require.NoError(t, err)
	defer resp.Body.Close()
	var l payprovider.Ledger
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&l))
	require.Len(t, l.Charges, 2)
	require.Equal(t, "succeeded", l.Charges[0].Status)
	require.Equal(t, "k1", l.Charges[0].IdempotencyKey)
	require.Equal(t, "failed", l.Charges[1].Status)
	require.Empty(t, l.Refunds)
	require.Equal(t, l.Charges, s.Ledger().Charges)
	require.Equal(t, 2, s.Posts(), "requests without a key or with a malformed body never reach idempotency")
}

// Stop cuts slow answers short and may be called twice.
func TestStopCutsSlowAnswers(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.SetFaults(func(payprovider.Request) payprovider.Fault { return payprovider.FaultSlowAfterCommit })
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/charges", bytes.NewBufferString(`{"amount":1,"currency":"eur"}`))
		req.Header.Set("Idempotency-Key", "k")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	require.Eventually(t, func() bool { return len(s.Ledger().Charges) == 1 }, 5*time.Second, 10*time.Millisecond)
	s.Stop()
	s.Stop()
	<-done
	http.DefaultClient.CloseIdleConnections()
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := payprovider.New(payprovider.Config{KeyTTL: -time.Second})
	require.ErrorContains(t, err, "Config.KeyTTL")
	s, err := payprovider.New(payprovider.Config{})
	require.NoError(t, err)
	s.Stop() // never started
}
