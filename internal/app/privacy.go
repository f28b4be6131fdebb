package app

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/ferry-outbox/ferry/codec"
	"github.com/ferry-outbox/ferry/redact"
)

// Codec builds the payload codec of CodecKeys or CodecKeyFile; nil when
// neither is set (payloads stay in clear in Temporal). The file is read
// here, so a restart picks up a rotated file. Errors name the setting and
// the key's position, never a key.
func (c Config) Codec() (*codec.Codec, error) {
	if len(c.CodecKeys) > 0 && c.CodecKeyFile != "" {
		return nil, fmt.Errorf("codec keys: set --codec-key (FERRY_CODEC_KEY) or --codec-key-file (FERRY_CODEC_KEY_FILE), not both")
	}
	where, specs := "--codec-key (FERRY_CODEC_KEY)", c.CodecKeys
	if c.CodecKeyFile != "" {
		where = "--codec-key-file " + c.CodecKeyFile
		raw, err := os.ReadFile(c.CodecKeyFile)
		if err != nil {
			return nil, fmt.Errorf("codec key file (--codec-key-file): %w", err)
		}
		specs = keyFileLines(raw)
		if len(specs) == 0 {
			return nil, fmt.Errorf("codec key file %s (--codec-key-file) holds no key: one key per line, the first encrypts", c.CodecKeyFile)
		}
	}
	var keys []codec.Key
	for _, spec := range specs {
		for _, s := range strings.Split(spec, ",") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			k, err := codec.ParseKey(s)
			if err != nil {
				return nil, fmt.Errorf("%s, key %d: %w", where, len(keys)+1, err)
			}
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	cdc, err := codec.New(keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return cdc, nil
}

// keyFileLines are the non-empty lines of a key file that are not comments.
func keyFileLines(raw []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// Redactor builds the redactor of SensitiveFields; nil (redaction off)
// when none is named.
func (c Config) Redactor() (*redact.Redactor, error) {
	r, err := redact.New(c.SensitiveFields)
	if err != nil {
		return nil, fmt.Errorf("--sensitive-field (FERRY_SENSITIVE_FIELDS): %w", err)
	}
	return r, nil
}
