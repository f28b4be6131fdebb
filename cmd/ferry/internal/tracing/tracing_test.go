package tracing_test

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/ferry-outbox/ferry/cmd/ferry/internal/tracing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// collector is an in-process OTLP receiver that also counts the
// connections made to it.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer

	conns atomic.Int64
	mu    sync.Mutex
	got   []*tracepb.ResourceSpans
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, req.ResourceSpans...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// spans returns the service.name of each exported span's resource, by span
// name.
func (c *collector) spans() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for _, rs := range c.got {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				out[s.Name] = service
			}
		}
	}
	return out
}

// httpCollector serves OTLP/HTTP (protobuf) on a loopback URL.
func httpCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res, _ := c.Export(r.Context(), &req)
		out, _ := proto.Marshal(res)
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return c, srv.URL
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return conn, err
}

// grpcCollector serves OTLP/gRPC on a loopback URL.
func grpcCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(countingListener{ln, &c.conns}) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return c, "http://" + ln.Addr().String()
}

func emit(t *testing.T, p *tracing.Provider, name string) {
	t.Helper()
	_, span := p.Tracer("test").Start(context.Background(), name)
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.Shutdown(ctx), "Shutdown flushes the batch")
	require.NoError(t, p.Shutdown(ctx), "a second Shutdown is harmless")
}

// With an OTLP exporter, a span ended before Shutdown reaches the collector
// under the configured service name: Shutdown flushes the batch processor.
func TestProviderExportsOverOTLP(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		exporter string
		receiver func(*testing.T) (*collector, string)
	}{
		{tracing.ExporterOTLPHTTP, httpCollector},
		{tracing.ExporterOTLPGRPC, grpcCollector},
	} {
		t.Run(tt.exporter, func(t *testing.T) {
			t.Parallel()
			c, endpoint := tt.receiver(t)
			p, err := tracing.New(tracing.Config{Exporter: tt.exporter, Endpoint: endpoint, ServiceName: "ferry-test"})
			require.NoError(t, err)
			require.True(t, p.Exporting())

			emit(t, p, "probe")
			require.Equal(t, map[string]string{"probe": "ferry-test"}, c.spans())
		})
	}
}

// Off (the default), the provider is the global one: spans go wherever the
// embedding service sends them, and Ferry neither exports nor dials, even
// with an endpoint configured.
func TestProviderOffExportsAndDialsNothing(t *testing.T) {
	t.Parallel()
	hc, hurl := httpCollector(t)
	gc, gurl := grpcCollector(t)
	for _, endpoint := range []string{hurl, gurl} {
		p, err := tracing.New(tracing.Config{Endpoint: endpoint})
		require.NoError(t, err)
		require.False(t, p.Exporting())
		require.Equal(t, otel.GetTracerProvider(), p.TracerProvider)
		emit(t, p, "probe")
	}
	require.Zero(t, hc.conns.Load()+gc.conns.Load(), "connections to the collectors")
	require.Empty(t, hc.spans())
	require.Empty(t, gc.spans())
}

// A collector that is down cannot stop a Ferry process from starting:
// the exporter dials on the first export, not in New.
func TestProviderDoesNotDialInNew(t *testing.T) {
	t.Parallel()
	for _, exporter := range []string{tracing.ExporterOTLPHTTP, tracing.ExporterOTLPGRPC} {
		c, endpoint := httpCollector(t)
		p, err := tracing.New(tracing.Config{Exporter: exporter, Endpoint: endpoint})
		require.NoError(t, err)
		require.Zero(t, c.conns.Load(), "%s dialled in New", exporter)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, p.Shutdown(ctx), "nothing to flush")
		cancel()
		require.Zero(t, c.conns.Load(), "%s dialled with nothing to export", exporter)
	}
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		in      tracing.Config
		want    string // Exporter after defaults
		wantErr string
	}{
		{"off by default", tracing.Config{}, tracing.ExporterNone, ""},
		{"grpc", tracing.Config{Exporter: "otlp-grpc", Endpoint: "https://collector:4317"}, tracing.ExporterOTLPGRPC, ""},
		{"http", tracing.Config{Exporter: "otlp-http", Endpoint: "http://collector:4318/base/"}, tracing.ExporterOTLPHTTP, ""},
		{"unknown exporter", tracing.Config{Exporter: "jaeger"}, "", `exporter "jaeger" (--otel-exporter, FERRY_OTEL_EXPORTER): use none, otlp, otlp-grpc or otlp-http`},
		{"endpoint without scheme", tracing.Config{Exporter: "otlp-grpc", Endpoint: "collector:4317"}, "", `endpoint "collector:4317" (--otel-endpoint, FERRY_OTEL_ENDPOINT): use a URL`},
		{"endpoint without host", tracing.Config{Exporter: "otlp-http", Endpoint: "http://"}, "", `endpoint "http://"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.in.WithDefaults()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.Exporter)
			require.NotEmpty(t, got.ServiceName)
			require.NotEmpty(t, got.ServiceVersion)
		})
	}
}

// "otlp" follows the standard protocol variables (t.Setenv: not parallel).
func TestExporterOTLPFollowsProtocolVariables(t *testing.T) {
	for _, tt := range []struct {
		traces, generic string
		want, wantErr   string
	}{
		{"", "", tracing.ExporterOTLPHTTP, ""},
		{"", "grpc", tracing.ExporterOTLPGRPC, ""},
		{"http/protobuf", "grpc", tracing.ExporterOTLPHTTP, ""},
		{"", "http/json", "", `OTLP protocol "http/json"`},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", tt.traces)
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tt.generic)
		got, err := tracing.Config{Exporter: tracing.ExporterOTLP}.WithDefaults()
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, got.Exporter, "traces=%q generic=%q", tt.traces, tt.generic)
	}
}

func TestServiceNameFromEnvironment(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "relay-eu")
	got, err := tracing.Config{}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, "relay-eu", got.ServiceName)
	got, err = tracing.Config{ServiceName: "explicit"}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, "explicit", got.ServiceName)
}
