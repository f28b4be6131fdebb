package ferry

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/codec"
	"github.com/ferry-outbox/ferry/effects"
)

func TestWorkerEffects(t *testing.T) {
	t.Parallel()
	// The activities hold the pool for later; nothing here connects.
	pool := &pgxpool.Pool{}
	routes, regs, err := workerEffects(EffectsConfig{}, nil, pool, nil)
	require.NoError(t, err)
	require.Nil(t, routes)
	require.Nil(t, regs)

	cfg, err := Config{Effects: EffectsConfig{
		Routes:      []string{"order.created=charge,email:confirmation", "order.cancelled=refund"},
		PaymentsURL: "http://127.0.0.1:1", SMTPAddress: "127.0.0.1:2",
	}}.WithDefaults()
	require.NoError(t, err)
	routes, regs, err = workerEffects(cfg.Effects, cfg.filled.effects, pool, nil)
	require.NoError(t, err)
	require.Len(t, regs, 3, "the effect workflows, the payment and the e-mail activities")
	got := routes("order", "created")
	require.Len(t, got, 2)
	require.Equal(t, effects.PaymentWorkflowName, got[0].WorkflowType)
	require.Equal(t, effects.EmailWorkflowName, got[1].WorkflowType)
	require.Equal(t, "refund", routes("order", "cancelled")[0].Effect)
}

// ferry.Temporal's PayloadConverter is the codec's when keys are set, so
// the envelopes workflow destinations send are sealed like the client's
// payloads, and Temporal's default (nil) without keys.
func TestPayloadConverterFollowsTheCodecKeys(t *testing.T) {
	t.Parallel()
	none, err := newPayloadConverter(converterDeps{})
	require.NoError(t, err)
	require.Nil(t, none.DataConverter)

	key := "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, codec.KeySize))
	pc, err := newPayloadConverter(converterDeps{Config: TemporalConfig{CodecKeys: []string{key}}})
	require.NoError(t, err)
	require.NotNil(t, pc.DataConverter)
	p, err := pc.DataConverter.ToPayload(map[string]string{"event_id": "e-1"})
	require.NoError(t, err)
	require.Equal(t, "binary/encrypted", string(p.GetMetadata()["encoding"]))

	_, err = newPayloadConverter(converterDeps{Config: TemporalConfig{CodecKeys: []string{"k1:short"}}})
	require.ErrorContains(t, err, "invalid codec key")
}
