// Package tracing follows a pod across the stages with OpenTelemetry.
//
// Tracing is off unless the tracing-endpoint key names an OTLP/HTTP
// collector (Jaeger, the OpenTelemetry Collector). When it is on, a pod's
// start is one trace: podconfig opens it at the pod's first sight, and every
// bus message about the pod carries the W3C trace context in its NATS
// headers (docs/bus.md, "Trace context"), so that the pod workers' sync and
// runtime calls, the prober's results and the status manager's patch (and
// the API server's own spans behind it, when the API server traces too)
// hang under it.
//
// Messages that carry several pods (a PodUpdate of a batch) carry each
// traced pod's own context as well, so batching never joins two pods'
// traces; a stage reads a pod's context with PodContext. Stages that act
// on a pod later than the message that told them (a sync from the work
// queue, a coalesced status patch) keep its newest context in a Pods.
package tracing

import (
	"context"
	"fmt"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Attribute keys of the spans about a pod (OpenTelemetry's Kubernetes
// resource conventions, plus the stage that made the span).
const (
	AttrPodUID    = attribute.Key("k8s.pod.uid")
	AttrPodName   = attribute.Key("k8s.pod.name")
	AttrNamespace = attribute.Key("k8s.namespace.name")
	AttrNode      = attribute.Key("k8s.node.name")
	AttrStage     = attribute.Key("splitlet.stage")
)

// Config turns tracing on and says how much of it.
type Config struct {
	// Endpoint of an OTLP/HTTP collector: a URL (http://127.0.0.1:4318)
	// or host:port (plain HTTP). Empty: tracing off.
	Endpoint string
	// SampleRate is the share of new traces kept, 0 to 1; traces begun
	// elsewhere (a message's context, an API server's request) follow
	// their parent's decision.
	SampleRate float64
}

// Enabled says whether the configuration turns tracing on.
func (c Config) Enabled() bool { return c.Endpoint != "" }

// Identity names what a process's spans come from.
type Identity struct {
	Service  string // service.name: the binary ("splitlet", "podworkers")
	Node     string
	Instance string
}

// Provider is a tracer provider and the function that flushes and stops it.
type Provider struct {
	trace.TracerProvider
	shutdown func(context.Context) error
}

// Shutdown sends what is buffered and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	return p.shutdown(ctx)
}

// Enabled says whether spans are recorded at all (a nil provider: no).
func (p *Provider) Enabled() bool { return p != nil && p.shutdown != nil }

// Noop is a provider that records nothing.
func Noop() *Provider { return &Provider{TracerProvider: noop.NewTracerProvider()} }

// New returns the provider the configuration asks for: a no-op one when
// tracing is off, else one batching spans to the OTLP/HTTP endpoint.
func New(ctx context.Context, cfg Config, id Identity) (*Provider, error) {
	if !cfg.Enabled() {
		return Noop(), nil
	}
	if cfg.SampleRate < 0 || cfg.SampleRate > 1 {
		return nil, fmt.Errorf("invalid tracing-sample-rate %v: must be 0 to 1", cfg.SampleRate)
	}
	client, err := newOTLPHTTP(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter for %s: %w", cfg.Endpoint, err)
	}
	return WithExporter(exp, cfg.SampleRate, id), nil
}

// WithExporter returns a recording provider that batches spans to exp (a
// test passes an in-memory exporter).
func WithExporter(exp sdktrace.SpanExporter, sampleRate float64, id Identity) *Provider {
	res := sdkresource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(id.Service),
		semconv.ServiceInstanceID(id.Instance),
		AttrNode.String(id.Node),
	)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sampleRate))),
	)
	return &Provider{TracerProvider: tp, shutdown: tp.Shutdown}
}

// Transport wraps an HTTP client transport so that its requests carry the
// caller's trace context and are spans of their own (the API server joins
// the trace when it traces too). With tracing off it returns rt unchanged.
func (p *Provider) Transport(rt http.RoundTripper) http.RoundTripper {
	if !p.Enabled() {
		return rt
	}
	return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(p), otelhttp.WithPropagators(propagation.TraceContext{}))
}

// Handler wraps an HTTP server's handler so that a request carrying a trace
// context (the API server's proxy to the kubelet API) continues that trace.
func (p *Provider) Handler(h http.Handler, operation string) http.Handler {
	if !p.Enabled() {
		return h
	}
	return otelhttp.NewHandler(h, operation, otelhttp.WithTracerProvider(p), otelhttp.WithPropagators(propagation.TraceContext{}),
		// "<operation> GET /containerLogs/{namespace}/{pod}/{container}":
		// the route once the mux has matched it, else the method.
		otelhttp.WithSpanNameFormatter(func(op string, r *http.Request) string {
			if r.Pattern != "" {
				return op + " " + r.Pattern
			}
			return op + " " + r.Method
		}))
}

// PodAttributes are the attributes of a span about a pod.
func PodAttributes(namespace, name, uid string) trace.SpanStartOption {
	return trace.WithAttributes(AttrNamespace.String(namespace), AttrPodName.String(name), AttrPodUID.String(uid))
}
