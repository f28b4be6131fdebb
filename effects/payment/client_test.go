package payment_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/effects/payment"
	"github.com/ferry-outbox/ferry/internal/sandbox/payprovider"
)

type bundle struct {
	srv    *payprovider.Server
	client *payment.Client
	now    *atomic.Int64 // the provider's clock, unix nanoseconds
}

// setup starts a sandbox provider on loopback and a client with a short
// timeout (slow faults answer after 2s).
func setup(t *testing.T, faults func(payprovider.Request) payprovider.Fault) *bundle {
	t.Helper()
	now := &atomic.Int64{}
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	srv, err := payprovider.New(payprovider.Config{
		Faults: faults, SlowDelay: 2 * time.Second,
		Now: func() time.Time { return time.Unix(0, now.Load()) },
	})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(srv.Stop)
	c, err := payment.New(payment.Config{BaseURL: srv.URL(), Timeout: 500 * time.Millisecond})
	require.NoError(t, err)
	return &bundle{srv: srv, client: c, now: now}
}

var order = payment.ChargeParams{Amount: 4200, Currency: "eur", Reference: "order/o1"}

func onFirstPost(f payprovider.Fault) func(payprovider.Request) payprovider.Fault {
	return func(r payprovider.Request) payprovider.Fault {
		if r.Method == "POST" && r.Seen == 0 {
			return f
		}
		return payprovider.FaultNone
	}
}

func TestChargeReplayedWithTheSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	first, replayed, err := b.client.CreateCharge(ctx, "k1", order)
	require.NoError(t, err)
	require.False(t, bool(replayed))
	require.Equal(t, "succeeded", first.Status)
	again, replayed, err := b.client.CreateCharge(ctx, "k1", order)
	require.NoError(t, err)
	require.True(t, bool(replayed))
	require.Equal(t, first, again)
	require.Len(t, b.srv.Ledger().Charges, 1)

	found, ok, err := b.client.ChargeByKey(ctx, "k1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, first.ID, found.ID)
	_, ok, err = b.client.ChargeByKey(ctx, "never-sent")
	require.NoError(t, err)
	require.False(t, ok)
}

func TestKeyWithOtherParametersIsAMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, _, err := b.client.CreateCharge(context.Background(), "k1", order)
	require.NoError(t, err)
	other := order
	other.Amount++
	_, _, err = b.client.CreateCharge(context.Background(), "k1", other)
	require.Equal(t, payment.ClassKeyMismatch, payment.ClassOf(err), "%v", err)
	require.Len(t, b.srv.Ledger().Charges, 1)
}

// Every fault that strikes after the provider committed leaves the client
// with an unknown outcome, and the lookup by key finds the one charge.
func TestFaultsAfterCommitAreUnknownAndFoundByKey(t *testing.T) {
	t.Parallel()
	for _, f := range []payprovider.Fault{payprovider.FaultSlowAfterCommit, payprovider.FaultErrorAfterCommit, payprovider.FaultDropAfterCommit} {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, onFirstPost(f))
			_, _, err := b.client.CreateCharge(context.Background(), "k1", order)
			require.Equal(t, payment.ClassUnknown, payment.ClassOf(err), "%v", err)
			ch, ok, err := b.client.ChargeByKey(context.Background(), "k1")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, int64(4200), ch.Amount)
			// The same key again gets the stored charge, not a new one.
			again, replayed, err := b.client.CreateCharge(context.Background(), "k1", order)
			require.NoError(t, err)
			require.True(t, bool(replayed))
			require.Equal(t, ch.ID, again.ID)
			require.Len(t, b.srv.Ledger().Charges, 1)
			require.Equal(t, 1, b.srv.Injected()[f])
		})
	}
}

// A drop before the provider recorded anything is unknown to the client
// too (the request was written), and the lookup says never seen.
func TestDropBeforeCommitIsNeverSeen(t *testing.T) {
	t.Parallel()
	b := setup(t, onFirstPost(payprovider.FaultDropBeforeCommit))
	_, _, err := b.client.CreateCharge(context.Background(), "k1", order)
	require.Equal(t, payment.ClassUnknown, payment.ClassOf(err), "%v", err)
	_, ok, err := b.client.ChargeByKey(context.Background(), "k1")
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, b.srv.Ledger().Charges)
}

func TestNothingListeningIsNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.Stop()
	_, _, err := b.client.CreateCharge(context.Background(), "k1", order)
	require.Equal(t, payment.ClassNotSent, payment.ClassOf(err), "%v", err)
}

func TestRateLimitedCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, onFirstPost(payprovider.FaultRateLimit))
	_, _, err := b.client.CreateCharge(context.Background(), "k1", order)
	var pe *payment.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, payment.ClassRateLimited, pe.Class)
	require.Equal(t, time.Second, pe.RetryAfter)
	_, _, err = b.client.CreateCharge(context.Background(), "k1", order)
	require.NoError(t, err, "a 429 stores nothing: the key is still fresh")
	require.Len(t, b.srv.Ledger().Charges, 1)
}

// While the first request with a key is in flight, a second one and a
// lookup get 409; afterwards the stored response.
func TestInFlightKeyIsInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, onFirstPost(payprovider.FaultStall))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _, _ = b.client.CreateCharge(context.Background(), "k1", order) // times out: the stall outlasts it
	}()
	require.Eventually(t, func() bool {
		_, _, err := b.client.ChargeByKey(context.Background(), "k1")
		return payment.ClassOf(err) == payment.ClassInProgress
	}, 5*time.Second, 20*time.Millisecond)
	_, _, err := b.client.CreateCharge(context.Background(), "k1", order)
	require.Equal(t, payment.ClassInProgress, payment.ClassOf(err), "%v", err)
	wg.Wait()
	require.Eventually(t, func() bool {
		_, ok, err := b.client.ChargeByKey(context.Background(), "k1")
		return err == nil && ok
	}, 5*time.Second, 20*time.Millisecond)
	require.Len(t, b.srv.Ledger().Charges, 1)
}

func TestDeclinedAndInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	big := order
	big.Amount = 2_000_000
	_, _, err := b.client.CreateCharge(context.Background(), "k1", big)
	var pe *payment.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, payment.ClassDeclined, pe.Class)
	require.Equal(t, "card_declined", pe.Code)
	require.NotEmpty(t, pe.Charge)
	ch, ok, err := b.client.ChargeByKey(context.Background(), "k1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "failed", ch.Status)

	bad := order
	bad.Currency = "euro"
	_, _, err = b.client.CreateCharge(context.Background(), "k2", bad)
	require.Equal(t, payment.ClassInvalid, payment.ClassOf(err), "%v", err)
	_, _, err = b.client.CreateCharge(context.Background(), "k2", order)
	require.NoError(t, err, "a 400 stores nothing: the key may be used for a valid request")
}

// After the key's retention the provider forgets it: the same key charges
// again. This is the window reconciliation must close well before.
func TestExpiredKeyChargesAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, _, err := b.client.CreateCharge(context.Background(), "k1", order)
	require.NoError(t, err)
	b.now.Add(int64(25 * time.Hour))
	_, ok, err := b.client.ChargeByKey(context.Background(), "k1")
	require.NoError(t, err)
	require.False(t, ok)
	_, replayed, err := b.client.CreateCharge(context.Background(), "k1", order)
	require.NoError(t, err)
	require.False(t, bool(replayed))
	require.Len(t, b.srv.Ledger().Charges, 2)
	byRef, err := b.client.ChargesByReference(context.Background(), "order/o1")
	require.NoError(t, err)
	require.Len(t, byRef, 2, "metadata outlives the key")
}

func TestRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch, _, err := b.client.CreateCharge(context.Background(), "k1", order)
	require.NoError(t, err)
	rf, _, err := b.client.CreateRefund(context.Background(), "r1", payment.RefundParams{Charge: ch.ID})
	require.NoError(t, err)
	require.Equal(t, int64(4200), rf.Amount)
	_, _, err = b.client.CreateRefund(context.Background(), "r2", payment.RefundParams{Charge: ch.ID})
	require.Equal(t, payment.ClassInvalid, payment.ClassOf(err), "nothing left to refund: %v", err)
	got, ok, err := b.client.RefundByKey(context.Background(), "r1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, rf.ID, got.ID)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []payment.Config{{}, {BaseURL: "ftp://x"}, {BaseURL: "http://"}, {BaseURL: "http://x", Timeout: -1}} {
		_, err := payment.New(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}
