// Package tracingtest is an OTLP trace collector for tests and benchmarks:
// it takes spans over OTLP/HTTP (what Splitlet's stages send) and OTLP/gRPC
// (what kube-apiserver sends) on 127.0.0.1 and keeps them in memory.
package tracingtest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Service  string // the resource's service.name
	Scope    string // the instrumentation scope
	Name     string
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex; empty for a root
	Attrs    map[string]string
}

// Collector receives spans. Keep nothing when Discard is set (a benchmark's
// sink), only count them.
type Collector struct {
	// URL is the OTLP/HTTP endpoint (http://127.0.0.1:port), for
	// tracing-endpoint.
	URL string
	// GRPCAddr is the OTLP/gRPC endpoint (127.0.0.1:port), for a
	// kube-apiserver's tracing configuration.
	GRPCAddr string

	discard bool
	mu      sync.Mutex
	spans   []Span
	count   int
	httpSrv *http.Server
	grpcSrv *grpc.Server
	wg      sync.WaitGroup
}

// Start runs a collector; discard keeps only the count of spans.
func Start(discard bool) (*Collector, error) {
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = hl.Close()
		return nil, err
	}
	c := &Collector{URL: "http://" + hl.Addr().String(), GRPCAddr: gl.Addr().String(), discard: discard}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", c.serveHTTP)
	c.httpSrv = &http.Server{Handler: mux}
	c.grpcSrv = grpc.NewServer()
	coltrace.RegisterTraceServiceServer(c.grpcSrv, grpcService{c: c})
	c.wg.Add(2)
	go func() { defer c.wg.Done(); _ = c.httpSrv.Serve(hl) }()
	go func() { defer c.wg.Done(); _ = c.grpcSrv.Serve(gl) }()
	return c, nil
}

// ForTest starts a collector stopped when the test ends.
func ForTest(t testing.TB) *Collector {
	t.Helper()
	c, err := Start(false)
	if err != nil {
		t.Fatalf("trace collector: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Stop closes both endpoints.
func (c *Collector) Stop() {
	_ = c.httpSrv.Close()
	c.grpcSrv.Stop()
	c.wg.Wait()
}

// Spans returns a copy of what was received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Count is the number of spans received.
func (c *Collector) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

func (c *Collector) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := &coltrace.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.add(req)
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

type grpcService struct {
	coltrace.UnimplementedTraceServiceServer
	c *Collector
}

func (g grpcService) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	g.c.add(req)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func (c *Collector) add(req *coltrace.ExportTraceServiceRequest) {
	var got []Span
	n := 0
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				n++
				if c.discard {
					continue
				}
				got = append(got, flatten(service, ss.GetScope().GetName(), s))
			}
		}
	}
	c.mu.Lock()
	c.count += n
	c.spans = append(c.spans, got...)
	c.mu.Unlock()
}

func flatten(service, scope string, s *tracepb.Span) Span {
	sp := Span{Service: service, Scope: scope, Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()),
		SpanID: hex.EncodeToString(s.GetSpanId()), Attrs: attrs(s.GetAttributes())}
	if p := s.GetParentSpanId(); len(p) > 0 {
		sp.ParentID = hex.EncodeToString(p)
	}
	return sp
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
