package tracing

import (
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

func spanContext(t *testing.T, traceHex, spanHex string, sampled bool) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex(traceHex)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex(spanHex)
	if err != nil {
		t.Fatal(err)
	}
	var flags trace.TraceFlags
	if sampled {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags})
}

func TestInjectNothingUntraced(t *testing.T) {
	if h := Inject(t.Context()); h != nil {
		t.Errorf("untraced context: headers %v, want none", h)
	}
	unsampled := spanContext(t, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", false)
	if h := Inject(trace.ContextWithSpanContext(t.Context(), unsampled)); h != nil {
		t.Errorf("unsampled context: headers %v, want none", h)
	}
}

func TestRoundTripWithPods(t *testing.T) {
	msg := spanContext(t, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", true)
	a := spanContext(t, "11111111111111111111111111111111", "1111111111111111", true)
	b := spanContext(t, "22222222222222222222222222222222", "2222222222222222", true)
	off := spanContext(t, "33333333333333333333333333333333", "3333333333333333", false)
	ctx := WithPods(trace.ContextWithSpanContext(t.Context(), msg), map[string]trace.SpanContext{"a": a, "b": b, "off": off})
	h := Inject(ctx)
	if got := h.Get(HeaderTraceparent); got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("traceparent %q", got)
	}
	if n := len(h[HeaderPodTraceparent]); n != 2 {
		t.Errorf("%d per-pod values (%v), want 2: the unsampled pod carries none", n, h[HeaderPodTraceparent])
	}

	// What a receiver sees, after the headers crossed NATS.
	got := Extract(t.Context(), nats.Header(h))
	if sc := trace.SpanContextFromContext(got); sc.TraceID() != msg.TraceID() || sc.SpanID() != msg.SpanID() || !sc.IsRemote() {
		t.Errorf("message context %v, want %v (remote)", sc, msg)
	}
	for uid, want := range map[string]trace.SpanContext{"a": a, "b": b, "off": msg, "unknown": msg} {
		sc := trace.SpanContextFromContext(PodContext(got, uid))
		if sc.TraceID() != want.TraceID() || sc.SpanID() != want.SpanID() {
			t.Errorf("pod %s: %v, want %v", uid, sc, want)
		}
	}
}

func TestExtractIgnoresGarbage(t *testing.T) {
	h := nats.Header{HeaderTraceparent: {"not a traceparent"}, HeaderPodTraceparent: {"nospace", "uid 00-zz-zz-01"}}
	ctx := Extract(t.Context(), h)
	if Traced(ctx) || Traced(PodContext(ctx, "uid")) {
		t.Error("a malformed header gave a trace to continue")
	}
}

func TestPodsWindow(t *testing.T) {
	p := NewPods()
	a := spanContext(t, "11111111111111111111111111111111", "1111111111111111", true)
	p.Remember(trace.ContextWithRemoteSpanContext(t.Context(), a), "uid")
	if sc := trace.SpanContextFromContext(p.Context(t.Context(), "uid")); sc.SpanID() != a.SpanID() {
		t.Fatalf("remembered %v, got %v", a, sc)
	}
	own := spanContext(t, "11111111111111111111111111111111", "4444444444444444", true)
	p.Continue("uid", own)
	if sc := trace.SpanContextFromContext(p.Context(t.Context(), "uid")); sc.SpanID() != own.SpanID() {
		t.Errorf("continued with %v, got %v", own, sc)
	}
	p.Continue("other", own) // no message told of it: nothing to continue
	if Traced(p.Context(t.Context(), "other")) {
		t.Error("Continue opened a trace for a pod no message named")
	}
	// past the follow window, the pod's later work starts no span under it.
	p.mu.Lock()
	e := p.m["uid"]
	e.at = e.at.Add(-follow - 1)
	p.m["uid"] = e
	p.mu.Unlock()
	if Traced(p.Context(t.Context(), "uid")) {
		t.Error("context given after the follow window")
	}
	var nilPods *Pods
	nilPods.Remember(t.Context(), "x")
	nilPods.Continue("x", a)
	if Traced(nilPods.Context(t.Context(), "x")) {
		t.Error("a nil store keeps contexts")
	}
}
