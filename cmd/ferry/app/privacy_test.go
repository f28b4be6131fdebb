package app

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry"
)

func randomKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(b)
}

func TestCodecSettings(t *testing.T) {
	t.Parallel()
	k1, k2 := randomKey(t), randomKey(t)
	file := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(file, []byte("# newest first\nnew:"+k2+"\n\nold:"+k1+"\n"), 0o600))
	badFile := filepath.Join(t.TempDir(), "bad")
	require.NoError(t, os.WriteFile(badFile, []byte("k:"+k1[:20]+"!!\n"), 0o600))
	keys := func(k ...string) Config { return Config{Temporal: ferry.TemporalConfig{CodecKeys: k}} }
	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, []byte("# nothing yet\n"), 0o600))

	t.Run("off by default", func(t *testing.T) {
		t.Parallel()
		c, err := Config{}.Codec()
		require.NoError(t, err)
		require.Nil(t, c)
	})
	t.Run("keys from the flag, comma-separated too; the first encrypts", func(t *testing.T) {
		t.Parallel()
		c, err := Config{Temporal: ferry.TemporalConfig{CodecKeys: []string{"b:" + k2 + ",a:" + k1}}}.Codec()
		require.NoError(t, err)
		require.Equal(t, "b", c.KeyID())
	})
	t.Run("keys from a file", func(t *testing.T) {
		t.Parallel()
		c, err := Config{CodecKeyFile: file}.Codec()
		require.NoError(t, err)
		require.Equal(t, "new", c.KeyID())
	})
	errs := []struct {
		name string
		cfg  Config
		want string
	}{
		{"both", Config{Temporal: ferry.TemporalConfig{CodecKeys: []string{k1}}, CodecKeyFile: file}, "not both"},
		{"a short key", keys(k1, base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))), "ferry: TemporalConfig.CodecKeys key 2: invalid codec key: 16 bytes, need 32"},
		{"not base64", keys("k:" + k1[:20] + "!!"), "ferry: TemporalConfig.CodecKeys key 1: invalid codec key: not base64"},
		{"the same id twice", keys("a:"+k1, "a:"+k2), "id a is used twice"},
		{"a missing file", Config{CodecKeyFile: "/nonexistent/keys"}, "--codec-key-file"},
		{"an empty file", Config{CodecKeyFile: empty}, "holds no key"},
		{"a bad key in the file", Config{CodecKeyFile: badFile}, "codec key file " + badFile + " (--codec-key-file): key 1: invalid codec key"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Validation reads no file; building the codec reads it.
			_, err := tt.cfg.WithDefaults()
			if err == nil {
				_, err = tt.cfg.Codec()
			}
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), k1[:20], "never a key in an error")
		})
	}
}

func TestSensitiveFieldSettings(t *testing.T) {
	t.Parallel()
	r, err := Config{SensitiveFields: []string{"email,order.created:card.number"}}.Redactor()
	require.NoError(t, err)
	require.Equal(t, []string{"email", "order.created:card.number"}, r.Fields())
	_, err = Config{SensitiveFields: []string{"order:email"}}.WithDefaults()
	require.ErrorContains(t, err, "--sensitive-field (FERRY_SENSITIVE_FIELDS)")
}

func TestConfigNeverShowsCodecKeys(t *testing.T) {
	t.Parallel()
	key := randomKey(t)
	cfg, err := Config{Temporal: ferry.TemporalConfig{CodecKeys: []string{"k:" + key}}, SensitiveFields: []string{"email"}}.WithDefaults()
	require.NoError(t, err)
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "config", cfg)
	for _, out := range []string{fmt.Sprintf("%v %+v %s", cfg, cfg, cfg), logged.String()} {
		require.NotContains(t, out, key[:20])
	}
	require.Contains(t, logged.String(), "config.payload_codec=true")
	require.Contains(t, logged.String(), "config.sensitive_fields=[email]")
}
