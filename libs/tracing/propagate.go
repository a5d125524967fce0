package tracing

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The NATS headers of the trace context (docs/bus.md, "Trace context").
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
	// HeaderPodTraceparent carries, once per traced pod of a message
	// that has several, "<uid> <traceparent>".
	HeaderPodTraceparent = "Splitlet-Pod-Traceparent"
)

var w3c = propagation.TraceContext{}

// natsCarrier reads and writes the W3C headers on a NATS header under the
// exact lower-case names the recommendation gives (NATS header names are
// case-sensitive).
type natsCarrier nats.Header

func (c natsCarrier) Get(key string) string {
	if v := c[strings.ToLower(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c natsCarrier) Set(key, value string) { c[strings.ToLower(key)] = []string{value} }
func (c natsCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

type podsKey struct{}

// WithPods returns ctx carrying the span contexts of the pods a message
// holds, by UID, for Inject.
func WithPods(ctx context.Context, pods map[string]trace.SpanContext) context.Context {
	if len(pods) == 0 {
		return ctx
	}
	return context.WithValue(ctx, podsKey{}, pods)
}

// Inject returns the headers of a message sent within ctx: the current
// span's context, and each pod's of WithPods. It returns nil when there is
// nothing to carry (tracing off, or not sampled), so an untraced message
// costs nothing.
func Inject(ctx context.Context) nats.Header {
	var h nats.Header
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsSampled() {
		h = nats.Header{}
		w3c.Inject(ctx, natsCarrier(h))
	}
	if pods, _ := ctx.Value(podsKey{}).(map[string]trace.SpanContext); len(pods) > 0 {
		for uid, sc := range pods {
			if !sc.IsValid() || !sc.IsSampled() {
				continue
			}
			if h == nil {
				h = nats.Header{}
			}
			one := natsCarrier{}
			w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), one)
			h[HeaderPodTraceparent] = append(h[HeaderPodTraceparent], uid+" "+one.Get(HeaderTraceparent))
		}
	}
	return h
}

// Extract returns ctx continuing the trace a received message carries,
// with its per-pod contexts for PodContext.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	ctx = w3c.Extract(ctx, natsCarrier(h))
	if vals := h[HeaderPodTraceparent]; len(vals) > 0 {
		pods := make(map[string]trace.SpanContext, len(vals))
		for _, v := range vals {
			uid, tp, ok := strings.Cut(v, " ")
			if !ok {
				continue
			}
			sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), natsCarrier{HeaderTraceparent: {tp}}))
			if sc.IsValid() {
				pods[uid] = sc
			}
		}
		ctx = context.WithValue(ctx, podsKey{}, pods)
	}
	return ctx
}

// PodContext returns ctx continuing the pod's own trace when the message
// carried one for it, else ctx (the message's own context).
func PodContext(ctx context.Context, uid string) context.Context {
	if pods, _ := ctx.Value(podsKey{}).(map[string]trace.SpanContext); pods != nil {
		if sc, ok := pods[uid]; ok {
			return trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return ctx
}

// Traced says whether ctx holds a sampled trace to continue.
func Traced(ctx context.Context) bool {
	sc := trace.SpanContextFromContext(ctx)
	return sc.IsValid() && sc.IsSampled()
}

// Windows of a pod's context in Pods: work on the pod within follow of the
// last message about it joins its trace (a start's syncs, statuses,
// probe results and patches), later work (periodic resyncs) does not; an
// entry is dropped after forget.
const (
	follow = 5 * time.Minute
	forget = 10 * time.Minute
)

// Pods keeps the newest trace context of each traced pod, for work done on
// the pod after the message that told of it (a sync off the work queue, a
// coalesced publish or patch). Only sampled pods are kept, so with tracing
// off it stays empty. A nil *Pods keeps nothing.
type Pods struct {
	mu    sync.Mutex
	m     map[string]podEntry
	sweep time.Time
}

type podEntry struct {
	sc trace.SpanContext
	// at: when the last message about the pod came.
	at time.Time
}

// NewPods returns an empty store.
func NewPods() *Pods { return &Pods{m: map[string]podEntry{}} }

// Remember keeps the pod's context out of a received message's ctx
// (PodContext), if traced, and starts the pod's follow window afresh.
func (p *Pods) Remember(ctx context.Context, uid string) {
	sc := trace.SpanContextFromContext(PodContext(ctx, uid))
	if p == nil || !sc.IsValid() || !sc.IsSampled() {
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[uid] = podEntry{sc: sc, at: now}
	if now.Sub(p.sweep) > forget {
		p.sweep = now
		for k, e := range p.m {
			if now.Sub(e.at) > forget {
				delete(p.m, k)
			}
		}
	}
}

// Continue makes sc (a span of this stage about the pod) the parent of the
// pod's next work, within the window the last message opened.
func (p *Pods) Continue(uid string, sc trace.SpanContext) {
	if p == nil || !sc.IsValid() || !sc.IsSampled() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[uid]; ok {
		p.m[uid] = podEntry{sc: sc, at: e.at}
	}
}

// Context returns ctx continuing the pod's newest trace, or ctx when the
// pod has none or its window has passed.
func (p *Pods) Context(ctx context.Context, uid string) context.Context {
	if p == nil {
		return ctx
	}
	p.mu.Lock()
	e, ok := p.m[uid]
	p.mu.Unlock()
	if !ok || time.Since(e.at) > follow {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, e.sc)
}

// Start opens a span under ctx's span, from the same provider, when ctx's
// span records; otherwise it returns ctx and a span that does nothing, so
// code deep in a stage (a runtime call) traces without a tracer of its own.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return parent.TracerProvider().Tracer(scope).Start(ctx, name, opts...)
}

// scope names the instrumentation scope of spans opened by Start.
const scope = "github.com/splitlet/splitlet/libs/tracing"

// End ends a span, marking it failed with err if err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
