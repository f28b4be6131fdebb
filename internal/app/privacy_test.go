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
		c, err := Config{CodecKeys: []string{"b:" + k2 + ",a:" + k1}}.Codec()
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
		{"both", Config{CodecKeys: []string{k1}, CodecKeyFile: file}, "not both"},
		{"a short key", Config{CodecKeys: []string{k1, base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))}}, "--codec-key (FERRY_CODEC_KEY), key 2: invalid codec key: 16 bytes, need 32"},
		{"not base64", Config{CodecKeys: []string{"k:" + k1[:20] + "!!"}}, "--codec-key (FERRY_CODEC_KEY), key 1: invalid codec key: not base64"},
		{"a missing file", Config{CodecKeyFile: "/nonexistent/keys"}, "--codec-key-file"},
		{"an empty file", Config{CodecKeyFile: empty}, "holds no key"},
		{"the same id twice", Config{CodecKeys: []string{"a:" + k1, "a:" + k2}}, "id a is used twice"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.cfg.WithDefaults()
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
	cfg, err := Config{CodecKeys: []string{"k:" + key}, SensitiveFields: []string{"email"}}.WithDefaults()
	require.NoError(t, err)
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "config", cfg)
	for _, out := range []string{fmt.Sprintf("%v %+v %s", cfg, cfg, cfg), logged.String()} {
		require.NotContains(t, out, key[:20])
	}
	require.Contains(t, logged.String(), "config.payload_codec=true")
	require.Contains(t, logged.String(), "config.sensitive_fields=[email]")
}
