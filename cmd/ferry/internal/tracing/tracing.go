package tracing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime/debug"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Exporters Config.Exporter accepts.
const (
	// ExporterNone exports nothing and dials nothing.
	ExporterNone = "none"
	// ExporterOTLP is OTLP over the protocol named by
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL.
	ExporterOTLP = "otlp"
	// ExporterOTLPGRPC is OTLP over gRPC (port 4317 by convention).
	ExporterOTLPGRPC = "otlp-grpc"
	// ExporterOTLPHTTP is OTLP over HTTP with protobuf (port 4318).
	ExporterOTLPHTTP = "otlp-http"
)

// Config configures a Provider.
type Config struct {
	// Exporter is where spans go. Default ExporterNone: nothing is exported
	// or dialled, and the Provider is the global one (otel.GetTracerProvider,
	// a no-op unless the embedding service set one). ExporterOTLP takes its
	// protocol from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
	// OTEL_EXPORTER_OTLP_PROTOCOL ("grpc" or "http/protobuf"; default
	// "http/protobuf", as the OpenTelemetry specification says).
	Exporter string
	// Endpoint is the collector's base URL, e.g. http://collector:4318; as
	// with OTEL_EXPORTER_OTLP_ENDPOINT, OTLP/HTTP posts to its path plus
	// /v1/traces, and https:// means TLS. Default: the exporter reads the
	// standard OTEL_EXPORTER_OTLP_* variables (endpoint, headers,
	// certificates, timeout), else localhost:4317 (gRPC) or
	// localhost:4318 (HTTP).
	Endpoint string
	// ServiceName is the resource's service.name. Default
	// OTEL_SERVICE_NAME, else "ferry".
	ServiceName string
	// ServiceVersion is the resource's service.version. Default: the main
	// module's version in the build information, else "(devel)".
	ServiceVersion string
}

// WithDefaults fills zero fields and validates the result, naming the
// setting at fault.
func (c Config) WithDefaults() (Config, error) {
	c.Exporter = cmp.Or(c.Exporter, ExporterNone)
	c.ServiceName = cmp.Or(c.ServiceName, os.Getenv("OTEL_SERVICE_NAME"), "ferry")
	c.ServiceVersion = cmp.Or(c.ServiceVersion, buildVersion())
	if c.Exporter == ExporterOTLP {
		p := cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
		switch p {
		case "grpc":
			c.Exporter = ExporterOTLPGRPC
		case "http/protobuf":
			c.Exporter = ExporterOTLPHTTP
		default:
			return c, fmt.Errorf("OTLP protocol %q (OTEL_EXPORTER_OTLP_PROTOCOL): Ferry speaks grpc or http/protobuf", p)
		}
	}
	switch c.Exporter {
	case ExporterNone, ExporterOTLPGRPC, ExporterOTLPHTTP:
	default:
		return c, fmt.Errorf("OpenTelemetry exporter %q (--otel-exporter, FERRY_OTEL_EXPORTER): use none, otlp, otlp-grpc or otlp-http", c.Exporter)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("OpenTelemetry endpoint %q (--otel-endpoint, FERRY_OTEL_ENDPOINT): use a URL such as http://collector:4318", c.Endpoint)
		}
	}
	return c, nil
}

// Provider is the tracer provider of a Ferry process. Shutdown flushes the
// spans still queued.
type Provider struct {
	trace.TracerProvider
	sdk *sdktrace.TracerProvider // nil without an exporter
}

// New validates cfg and builds the provider: with an exporter, an SDK
// provider batching spans to it under a resource naming the service; without
// one, the global provider. The exporter connects lazily, on the first
// export.
func New(cfg Config) (*Provider, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Exporter == ExporterNone {
		return &Provider{TracerProvider: otel.GetTracerProvider()}, nil
	}
	exp, err := newExporter(cfg)
	if err != nil {
		return nil, err
	}
	// WithFromEnv first so that OTEL_RESOURCE_ATTRIBUTES adds to, but does
	// not override, the service's name and version.
	res, err := resource.New(context.Background(),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(
			attribute.String("service.name", cfg.ServiceName),
			attribute.String("service.version", cfg.ServiceVersion),
		))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, sdk: tp}, nil
}

func newExporter(cfg Config) (sdktrace.SpanExporter, error) {
	// New only configures the clients: neither dials before the first
	// export, so a collector that is down never stops Ferry from starting.
	ctx := context.Background()
	if cfg.Exporter == ExporterOTLPGRPC {
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("OTLP/gRPC exporter: %w", err)
		}
		return exp, nil
	}
	var opts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		u, _ := url.Parse(cfg.Endpoint) // checked by WithDefaults
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP/HTTP exporter: %w", err)
	}
	return exp, nil
}

// Exporting says whether spans leave the process.
func (p *Provider) Exporting() bool { return p.sdk != nil }

// Shutdown exports the spans still queued, within ctx, and stops the
// exporter. Without an exporter it does nothing (the global provider
// belongs to whoever set it). Safe to call more than once.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush spans: %w", err)
	}
	return nil
}

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
