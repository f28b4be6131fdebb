package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// Metadata of an encrypted payload.
const (
	// Encoding is the "encoding" metadata of an encrypted payload.
	Encoding = "binary/encrypted"
	// MetadataKeyID names the key that sealed the payload.
	MetadataKeyID = "encryption-key-id"
	// MetadataCipher names the cipher.
	MetadataCipher = "encryption-cipher"
	// Cipher is MetadataCipher's value.
	Cipher = "AES256-GCM"
)

// KeySize is the size of a key in bytes (AES-256).
const KeySize = 32

// ErrKey: a key is malformed. Not retryable; the message says which key
// (by position and id), never its bytes.
var ErrKey = errors.New("invalid codec key")

// ErrDecrypt: a payload could not be opened (unknown key id, tampered with,
// or sealed by a different key under the same id). Not retryable with the
// same keys.
var ErrDecrypt = errors.New("cannot decrypt payload")

// Key is one AES-256 key and its id.
type Key struct {
	// ID is written in clear into every payload the key seals. 1-64
	// letters, digits, '_', '.' or '-'.
	ID string
	// Secret is the key itself, KeySize bytes.
	Secret []byte
}

var keyID = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ParseKey reads "ID:BASE64" or "BASE64", the base64 (standard or URL
// alphabet, padded or not) of KeySize random bytes, e.g. from
// `openssl rand -base64 32`. Without an ID the key's id is derived from the
// key (the first 16 hex digits of a SHA-256 of it), so the same key always
// has the same id.
func ParseKey(s string) (Key, error) {
	s = strings.TrimSpace(s)
	var k Key
	if id, b64, ok := strings.Cut(s, ":"); ok {
		if !keyID.MatchString(id) {
			return k, fmt.Errorf("%w: key id %q: use 1-64 letters, digits, '_', '.' or '-' before the ':'", ErrKey, id)
		}
		k.ID, s = id, b64
	}
	secret, err := decodeBase64(s)
	if err != nil {
		return k, fmt.Errorf("%w: not base64 (generate one with `openssl rand -base64 32`)", ErrKey)
	}
	if len(secret) != KeySize {
		return k, fmt.Errorf("%w: %d bytes, need %d (generate one with `openssl rand -base64 32`)", ErrKey, len(secret), KeySize)
	}
	k.Secret = secret
	if k.ID == "" {
		sum := sha256.Sum256(append([]byte("ferry codec key id\x00"), secret...))
		k.ID = hex.EncodeToString(sum[:8])
	}
	return k, nil
}

func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// Codec is a converter.PayloadCodec that seals payloads with AES-256-GCM.
type Codec struct {
	sealID string
	aeads  map[string]cipher.AEAD
}

var _ converter.PayloadCodec = (*Codec)(nil)

// New builds a Codec over keys: the first seals, every one opens. Ids must
// be unique.
func New(keys []Key) (*Codec, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no key", ErrKey)
	}
	c := &Codec{sealID: keys[0].ID, aeads: make(map[string]cipher.AEAD, len(keys))}
	for i, k := range keys {
		if !keyID.MatchString(k.ID) {
			return nil, fmt.Errorf("%w: key %d: id %q: use 1-64 letters, digits, '_', '.' or '-'", ErrKey, i+1, k.ID)
		}
		if len(k.Secret) != KeySize {
			return nil, fmt.Errorf("%w: key %d (id %s): %d bytes, need %d", ErrKey, i+1, k.ID, len(k.Secret), KeySize)
		}
		if _, dup := c.aeads[k.ID]; dup {
			return nil, fmt.Errorf("%w: key %d: id %s is used twice", ErrKey, i+1, k.ID)
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("%w: key %d (id %s): %w", ErrKey, i+1, k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: key %d (id %s): %w", ErrKey, i+1, k.ID, err)
		}
		c.aeads[k.ID] = aead
	}
	return c, nil
}

// KeyID is the id of the key that seals.
func (c *Codec) KeyID() string { return c.sealID }

// Encode seals every payload with the first key. The key id is also the
// additional authenticated data, so a payload cannot be passed off as
// sealed by another key.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	aead := c.aeads[c.sealID]
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encrypt payload: %w", err)
		}
		nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return nil, fmt.Errorf("encrypt payload: nonce: %w", err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(Encoding),
				MetadataKeyID:              []byte(c.sealID),
				MetadataCipher:             []byte(Cipher),
			},
			Data: aead.Seal(nonce, nonce, plain, []byte(c.sealID)),
		}
	}
	return out, nil
}

// Decode opens every encrypted payload with the key it names; payloads that
// are not encrypted pass unchanged.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != Encoding {
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[MetadataKeyID])
		aead, ok := c.aeads[id]
		if !ok {
			return nil, fmt.Errorf("%w: it was encrypted with key id %q, which is not among the configured codec keys (TemporalConfig.CodecKeys; ferry: --codec-key): add that key", ErrDecrypt, id)
		}
		data := p.GetData()
		if len(data) < aead.NonceSize()+aead.Overhead() {
			return nil, fmt.Errorf("%w: key id %q: %d bytes is too short to be sealed data", ErrDecrypt, id, len(data))
		}
		n := aead.NonceSize()
		plain, err := aead.Open(nil, data[:n], data[n:], []byte(id))
		if err != nil {
			return nil, fmt.Errorf("%w: key id %q: authentication failed: the payload was altered, or sealed by a different key under the same id", ErrDecrypt, id)
		}
		var orig commonpb.Payload
		if err := proto.Unmarshal(plain, &orig); err != nil {
			return nil, fmt.Errorf("%w: key id %q: %w", ErrDecrypt, id, err)
		}
		out[i] = &orig
	}
	return out, nil
}

// DataConverter is the SDK's default converter with c applied to every
// payload.
func DataConverter(c *Codec) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}

// ClientOptions sets opts' DataConverter and FailureConverter so that
// payloads and failure messages and stack traces (which Temporal otherwise
// keeps in clear) are encrypted. Workers built on the client inherit both.
func ClientOptions(c *Codec, opts *client.Options) {
	dc := DataConverter(c)
	opts.DataConverter = dc
	opts.FailureConverter = FailureConverter(dc)
}

// FailureConverter moves failure messages and stack traces into an encoded
// attribute that dc encrypts.
func FailureConverter(dc converter.DataConverter) converter.FailureConverter {
	return cloningFailureConverter{temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter:          dc,
		EncodeCommonAttributes: true,
	})}
}

// cloningFailureConverter decodes a copy. The SDK's converter decodes the
// failure it is given in place, and the SDK hands it the very failure of a
// local activity's marker before recording that marker: the message would
// reach the history in clear next to its encrypted copy.
type cloningFailureConverter struct {
	converter.FailureConverter
}

func (c cloningFailureConverter) FailureToError(f *failurepb.Failure) error {
	if f == nil {
		return nil
	}
	return c.FailureConverter.FailureToError(proto.Clone(f).(*failurepb.Failure))
}
