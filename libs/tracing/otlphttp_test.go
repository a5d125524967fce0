package tracing

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestOTLPHTTPEndpoints(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:4318":              "http://127.0.0.1:4318/v1/traces",
		"http://127.0.0.1:4318":       "http://127.0.0.1:4318/v1/traces",
		"https://collector:4318/":     "https://collector:4318/v1/traces",
		"http://collector:4318/otlp/": "http://collector:4318/otlp/v1/traces",
	} {
		c, err := newOTLPHTTP(in)
		if err != nil || c.url != want {
			t.Errorf("newOTLPHTTP(%q) = %v, %v; want %s", in, c, err, want)
		}
	}
	for _, bad := range []string{"ftp://collector:21", "http://", "unix:///run/otel.sock"} {
		if _, err := newOTLPHTTP(bad); err == nil {
			t.Errorf("newOTLPHTTP(%q) took an endpoint that is not HTTP", bad)
		}
	}
}

func testSpans(names ...string) []*tracepb.ResourceSpans {
	var spans []*tracepb.Span
	for i, n := range names {
		spans = append(spans, &tracepb.Span{Name: n, TraceId: make([]byte, 16), SpanId: []byte{0, 0, 0, 0, 0, 0, 0, byte(i + 1)}})
	}
	return []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name",
			Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "podworkers"}}}}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
	}, {ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "other", TraceId: make([]byte, 16), SpanId: make([]byte, 8)}}}}}}
}

// collector answers each request with the next status of answers (200
// once they run out) and keeps every body it got.
type fakeCollector struct {
	mu      sync.Mutex
	answers []int
	headers []http.Header
	bodies  [][]byte
	reply   []byte
}

func (f *fakeCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bodies = append(f.bodies, body)
	f.headers = append(f.headers, r.Header.Clone())
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "not the OTLP traces path", http.StatusNotFound)
		return
	}
	if len(f.answers) > 0 {
		code := f.answers[0]
		f.answers = f.answers[1:]
		if code != http.StatusOK {
			http.Error(w, "collector says "+http.StatusText(code), code)
			return
		}
	}
	_, _ = w.Write(f.reply)
}

func (f *fakeCollector) requests() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.bodies...)
}

func newTestClient(t *testing.T, f *fakeCollector) *otlpHTTP {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := newOTLPHTTP(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c.retryBase, c.retryMax = time.Millisecond, 4*time.Millisecond
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// The body is an ExportTraceServiceRequest as the OTLP collector's own
// generated code reads it, every resource's spans in order.
func TestOTLPHTTPSendsExportRequest(t *testing.T) {
	f := &fakeCollector{}
	c := newTestClient(t, f)
	spans := testSpans("sync", "patch")
	if err := c.UploadTraces(t.Context(), spans); err != nil {
		t.Fatal(err)
	}
	got := f.requests()
	if len(got) != 1 {
		t.Fatalf("%d requests, want 1", len(got))
	}
	if ct := f.headers[0].Get("Content-Type"); ct != "application/x-protobuf" {
		t.Errorf("Content-Type %q", ct)
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(got[0], &req); err != nil {
		t.Fatalf("the collector cannot read the request: %v", err)
	}
	if !proto.Equal(&req, &coltrace.ExportTraceServiceRequest{ResourceSpans: spans}) {
		t.Fatalf("collector read %v, want the spans sent", &req)
	}
}

func TestOTLPHTTPRetriesWhatTheSpecificationSaysToRetry(t *testing.T) {
	f := &fakeCollector{answers: []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusOK}}
	c := newTestClient(t, f)
	if err := c.UploadTraces(t.Context(), testSpans("sync")); err != nil {
		t.Fatalf("export after retryable failures: %v", err)
	}
	got := f.requests()
	if len(got) != 5 {
		t.Fatalf("%d requests, want 5 (four refused, one taken)", len(got))
	}
	for _, b := range got[1:] {
		if string(b) != string(got[0]) {
			t.Fatal("a retry sent another body")
		}
	}
}

func TestOTLPHTTPDoesNotRetryABadRequest(t *testing.T) {
	f := &fakeCollector{answers: []int{http.StatusBadRequest}}
	c := newTestClient(t, f)
	err := c.UploadTraces(t.Context(), testSpans("sync"))
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "collector says Bad Request") {
		t.Fatalf("err = %v, want the 400 and the collector's text", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

func TestOTLPHTTPGivesUpWhenTheExportTimesOut(t *testing.T) {
	f := &fakeCollector{answers: make([]int, 1000)}
	for i := range f.answers {
		f.answers[i] = http.StatusServiceUnavailable
	}
	c := newTestClient(t, f)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	// the deadline may fall during a wait (the error names the last 503)
	// or during a request: either way the export ends with it.
	if err := c.UploadTraces(ctx, testSpans("sync")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	if n := len(f.requests()); n < 2 {
		t.Fatalf("%d requests before the deadline, want retries", n)
	}
}

func TestOTLPHTTPRetriesAnAbsentCollector(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	c, err := newOTLPHTTP(url)
	if err != nil {
		t.Fatal(err)
	}
	c.retryBase, c.retryMax = time.Millisecond, 4*time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := c.UploadTraces(ctx, testSpans("sync")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want retries until the deadline", err)
	}
}

func TestPartialSuccess(t *testing.T) {
	body, err := proto.Marshal(&coltrace.ExportTraceServiceResponse{PartialSuccess: &coltrace.ExportTracePartialSuccess{RejectedSpans: 3, ErrorMessage: "too old"}})
	if err != nil {
		t.Fatal(err)
	}
	if n, msg := partialSuccess(body); n != 3 || msg != "too old" {
		t.Fatalf("partialSuccess = %d, %q", n, msg)
	}
	empty, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	for _, b := range [][]byte{nil, empty, []byte("not protobuf \xff\xff\xff")} {
		if n, msg := partialSuccess(b); n != 0 || msg != "" {
			t.Fatalf("partialSuccess(%q) = %d, %q; want none", b, n, msg)
		}
	}
}
