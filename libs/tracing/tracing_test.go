package tracing_test

import (
	"context"
	"strings"
	"testing"

	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/libs/tracing/tracingtest"
)

// A provider from New sends its spans to the collector of tracing-endpoint,
// given as a URL or as host:port, and Shutdown flushes what is batched.
func TestNewExportsToTheCollector(t *testing.T) {
	col := tracingtest.ForTest(t)
	for _, endpoint := range []string{col.URL, strings.TrimPrefix(col.URL, "http://")} {
		p, err := tracing.New(context.Background(), tracing.Config{Endpoint: endpoint, SampleRate: 1},
			tracing.Identity{Service: "statussync", Node: "n1", Instance: "i1"})
		if err != nil {
			t.Fatalf("New(%s): %v", endpoint, err)
		}
		_, span := p.Tracer("test").Start(context.Background(), "sync "+endpoint, tracing.PodAttributes("default", "web", "u1"))
		span.End()
		if err := p.Shutdown(t.Context()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		found := false
		for _, s := range col.Spans() {
			if s.Name == "sync "+endpoint {
				found = true
				if s.Service != "statussync" || s.Attrs["k8s.pod.uid"] != "u1" || s.Attrs["k8s.pod.name"] != "web" {
					t.Errorf("span %+v: service or pod attributes lost", s)
				}
			}
		}
		if !found {
			t.Fatalf("endpoint %s: the collector got no span %q (got %+v)", endpoint, "sync "+endpoint, col.Spans())
		}
	}
}

func TestNewRefusesAnEndpointThatIsNotHTTP(t *testing.T) {
	if _, err := tracing.New(context.Background(), tracing.Config{Endpoint: "grpc://127.0.0.1:4317", SampleRate: 1}, tracing.Identity{Service: "x"}); err == nil {
		t.Fatal("New took a gRPC endpoint")
	}
}
