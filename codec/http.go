package codec

import (
	"net/http"
	"slices"

	"go.temporal.io/sdk/converter"
)

// maxRequestBytes bounds one request: a page of history holds payloads of
// up to 2 MB each.
const maxRequestBytes = 64 << 20

// Handler serves the codec over HTTP as the Temporal UI and CLI expect a
// codec endpoint: POST <prefix>/decode and <prefix>/encode with a JSON
// list of payloads. Browsers reach it from the UI's page, so requests from
// the origins in allowOrigins (e.g. "http://127.0.0.1:8233") are allowed by
// CORS; "*" allows any. Whoever reaches the handler can decrypt: serve it on
// loopback or behind the same authentication as the UI.
func Handler(c *Codec, allowOrigins []string) http.Handler {
	codecHandler := converter.NewPayloadCodecHTTPHandler(c)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && (slices.Contains(allowOrigins, origin) || slices.Contains(allowOrigins, "*")) {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Credentials", "true")
			h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
			h.Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)
		codecHandler.ServeHTTP(w, r)
	})
}
