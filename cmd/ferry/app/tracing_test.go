package app_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/ferry-outbox/ferry/cmd/ferry/app"
)

// The spans a process ends before it stops reach the collector: stopping
// the fx app flushes the batch. With the exporter off, the collector hears
// nothing.
func TestTracingModuleFlushesOnStop(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		exporter string
		wantPost bool
	}{{"otlp-http", true}, {"", false}} {
		t.Run("exporter="+tt.exporter, func(t *testing.T) {
			t.Parallel()
			var posts atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
					posts.Add(1)
				}
				w.Header().Set("Content-Type", "application/x-protobuf")
			}))
			t.Cleanup(srv.Close)

			var tp trace.TracerProvider
			a := fx.New(
				fx.Supply(app.Config{OTelExporter: tt.exporter, OTelEndpoint: srv.URL}.Telemetry()),
				fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
				app.TracingModule,
				fx.Populate(&tp),
			)
			require.NoError(t, a.Err())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, a.Start(ctx))
			_, span := tp.Tracer("test").Start(ctx, "work")
			span.End()
			require.Zero(t, posts.Load(), "batched, not sent span by span")
			require.NoError(t, a.Stop(ctx))
			if tt.wantPost {
				require.Equal(t, int64(1), posts.Load(), "Stop flushes the batch")
			} else {
				require.Zero(t, posts.Load())
			}
		})
	}
}
