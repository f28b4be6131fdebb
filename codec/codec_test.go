package codec_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/ferry-outbox/ferry/codec"
)

func newKey(t *testing.T, id string) codec.Key {
	t.Helper()
	secret := make([]byte, codec.KeySize)
	_, err := rand.Read(secret)
	require.NoError(t, err)
	return codec.Key{ID: id, Secret: secret}
}

func newCodec(t *testing.T, keys ...codec.Key) *codec.Codec {
	t.Helper()
	c, err := codec.New(keys)
	require.NoError(t, err)
	return c
}

type event struct {
	AggregateID string
	Email       string
}

func TestRoundTripThroughTheDataConverter(t *testing.T) {
	t.Parallel()
	c := newCodec(t, newKey(t, "k1"))
	dc := codec.DataConverter(c)
	in := event{AggregateID: "order-4711", Email: "ann@example.com"}
	p, err := dc.ToPayload(in)
	require.NoError(t, err)

	require.Equal(t, codec.Encoding, string(p.Metadata[converter.MetadataEncoding]))
	require.Equal(t, "k1", string(p.Metadata[codec.MetadataKeyID]))
	require.Equal(t, codec.Cipher, string(p.Metadata[codec.MetadataCipher]))
	require.NotContains(t, string(p.Data), "order-4711")
	require.NotContains(t, string(p.Data), "ann@example.com")
	require.NotContains(t, string(p.Data), "json/plain", "the original metadata is sealed too")

	var out event
	require.NoError(t, dc.FromPayload(p, &out))
	require.Equal(t, in, out)

	// The default converter, without the codec, cannot read it.
	require.Error(t, converter.GetDefaultDataConverter().FromPayload(p, &out))
}

func TestSealingTwiceGivesDifferentCiphertexts(t *testing.T) {
	t.Parallel()
	c := newCodec(t, newKey(t, "k1"))
	p := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`"same"`)}
	a, err := c.Encode([]*commonpb.Payload{p})
	require.NoError(t, err)
	b, err := c.Encode([]*commonpb.Payload{p})
	require.NoError(t, err)
	require.NotEqual(t, a[0].Data, b[0].Data, "a fresh nonce each time")
}

func TestRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t, "2024-01"), newKey(t, "2025-06")
	old := newCodec(t, k1)
	// Step 1: every process learns k2 and still seals with k1.
	learning := newCodec(t, k1, k2)
	// Step 2: k2 seals; k1 still opens what history holds.
	rotated := newCodec(t, k2, k1)
	p := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`{"email":"ann@example.com"}`)}

	fromOld, err := old.Encode([]*commonpb.Payload{p})
	require.NoError(t, err)
	fromLearning, err := learning.Encode([]*commonpb.Payload{p})
	require.NoError(t, err)
	require.Equal(t, "2024-01", string(fromLearning[0].Metadata[codec.MetadataKeyID]))
	fromRotated, err := rotated.Encode([]*commonpb.Payload{p})
	require.NoError(t, err)
	require.Equal(t, "2025-06", string(fromRotated[0].Metadata[codec.MetadataKeyID]))

	for _, sealed := range [][]*commonpb.Payload{fromOld, fromLearning, fromRotated} {
		got, err := rotated.Decode(sealed)
		require.NoError(t, err)
		require.True(t, proto.Equal(p, got[0]))
	}
	// A process that never learnt k2 cannot open what k2 sealed, and says
	// which key it lacks.
	_, err = old.Decode(fromRotated)
	require.ErrorIs(t, err, codec.ErrDecrypt)
	require.ErrorContains(t, err, `key id "2025-06"`)
	require.ErrorContains(t, err, "--codec-key")
}

func TestWrongKeyUnderTheSameID(t *testing.T) {
	t.Parallel()
	sealed, err := newCodec(t, newKey(t, "k")).Encode([]*commonpb.Payload{{Data: []byte("secret")}})
	require.NoError(t, err)
	_, err = newCodec(t, newKey(t, "k")).Decode(sealed)
	require.ErrorIs(t, err, codec.ErrDecrypt)
	require.ErrorContains(t, err, "authentication failed")
}

func TestTampering(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	c := newCodec(t, k1, k2)
	cases := map[string]func(p *commonpb.Payload){
		"a flipped bit of the ciphertext": func(p *commonpb.Payload) { p.Data[len(p.Data)-20] ^= 1 },
		"a flipped bit of the nonce":      func(p *commonpb.Payload) { p.Data[0] ^= 1 },
		"a flipped bit of the tag":        func(p *commonpb.Payload) { p.Data[len(p.Data)-1] ^= 1 },
		"truncated":                       func(p *commonpb.Payload) { p.Data = p.Data[:10] },
		"another key's id":                func(p *commonpb.Payload) { p.Metadata[codec.MetadataKeyID] = []byte("k2") },
	}
	for name, tamper := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sealed, err := c.Encode([]*commonpb.Payload{{Data: []byte(`{"email":"ann@example.com"}`)}})
			require.NoError(t, err)
			tamper(sealed[0])
			_, err = c.Decode(sealed)
			require.ErrorIs(t, err, codec.ErrDecrypt)
		})
	}
}

func TestPlainPayloadsPassDecode(t *testing.T) {
	t.Parallel()
	c := newCodec(t, newKey(t, "k1"))
	p := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`1`)}
	got, err := c.Decode([]*commonpb.Payload{p})
	require.NoError(t, err)
	require.Same(t, p, got[0], "histories written before the codec was on stay readable")
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	secret := bytes.Repeat([]byte{0xfb}, codec.KeySize) // base64 with '+' and '/'
	std := base64.StdEncoding.EncodeToString(secret)
	require.Contains(t, std, "+")

	k, err := codec.ParseKey("primary:" + std)
	require.NoError(t, err)
	require.Equal(t, codec.Key{ID: "primary", Secret: secret}, k)

	for _, s := range []string{std, base64.RawStdEncoding.EncodeToString(secret), base64.URLEncoding.EncodeToString(secret), " " + std + "\n"} {
		k, err := codec.ParseKey(s)
		require.NoError(t, err, s)
		require.Equal(t, secret, k.Secret)
		require.Len(t, k.ID, 16, "a derived id")
	}
	a, _ := codec.ParseKey(std)
	b, _ := codec.ParseKey(base64.RawURLEncoding.EncodeToString(secret))
	require.Equal(t, a.ID, b.ID, "the derived id depends on the key only")
	require.NotContains(t, std, a.ID)

	bad := []struct{ in, want string }{
		{"not base64!", "not base64"},
		{base64.StdEncoding.EncodeToString(secret[:16]), "16 bytes, need 32"},
		{"bad id:" + std, `key id "bad id"`},
		{":" + std, `key id ""`},
	}
	for _, tc := range bad {
		_, err := codec.ParseKey(tc.in)
		require.ErrorIs(t, err, codec.ErrKey, tc.in)
		require.ErrorContains(t, err, tc.want)
		require.False(t, strings.Contains(err.Error(), std), "the error never shows the key")
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	k := newKey(t, "k1")
	_, err := codec.New(nil)
	require.ErrorContains(t, err, "no key")
	_, err = codec.New([]codec.Key{k, k})
	require.ErrorContains(t, err, "key 2: id k1 is used twice")
	_, err = codec.New([]codec.Key{{ID: "k", Secret: []byte("short")}})
	require.ErrorContains(t, err, "5 bytes, need 32")
}

// The failure converter encrypts a failure's message and stack trace, reads
// them back, and leaves the failure it reads untouched: the SDK records a
// local activity's failure after reading it.
func TestFailureConverter(t *testing.T) {
	t.Parallel()
	c := newCodec(t, newKey(t, "k1"))
	fc := codec.FailureConverter(codec.DataConverter(c))
	f := fc.ErrorToFailure(temporal.NewApplicationErrorWithCause("no route for ann@example.com", "Unroutable", errors.New("NO_ROUTE ann@example.com")))
	require.Equal(t, "Encoded failure", f.GetMessage())
	require.Equal(t, "Encoded failure", f.GetCause().GetMessage())
	raw, err := proto.Marshal(f)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "ann@example.com")

	err = fc.FailureToError(f)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, "no route for ann@example.com", appErr.Message())
	require.Equal(t, "Unroutable", appErr.Type())
	require.Equal(t, "Encoded failure", f.GetMessage(), "the failure read stays encrypted")
	require.Equal(t, "Encoded failure", f.GetCause().GetMessage())
}
