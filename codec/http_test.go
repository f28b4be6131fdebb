package codec_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

	"github.com/ferry-outbox/ferry/codec"
)

// What the Temporal UI does: it posts the payloads it shows to the codec
// endpoint and displays what comes back.
func TestHandlerDecodesForTheUI(t *testing.T) {
	t.Parallel()
	c := newCodec(t, newKey(t, "k1"))
	srv := httptest.NewServer(codec.Handler(c, []string{"http://127.0.0.1:8233"}))
	t.Cleanup(srv.Close)

	sealed, err := codec.DataConverter(c).ToPayload(event{AggregateID: "order-4711", Email: "ann@example.com"})
	require.NoError(t, err)
	remote := converter.NewRemotePayloadCodec(converter.RemotePayloadCodecOptions{Endpoint: srv.URL + "/codec"})
	got := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), remote).ToString(sealed)
	require.Contains(t, got, "ann@example.com")

	req, err := http.NewRequest(http.MethodOptions, srv.URL+"/codec/decode", nil)
	require.NoError(t, err)
	req.Header.Set("Origin", "http://127.0.0.1:8233")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "http://127.0.0.1:8233", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, resp.Header.Get("Access-Control-Allow-Headers"), "X-Namespace")

	req, err = http.NewRequest(http.MethodPost, srv.URL+"/codec/decode", strings.NewReader(`{"payloads":[]}`))
	require.NoError(t, err)
	req.Header.Set("Origin", "http://evil.example")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), "another page's origin is not allowed")
}
