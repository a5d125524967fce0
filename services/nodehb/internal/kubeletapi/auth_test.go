package kubeletapi

import (
	"net/http/httptest"
	"testing"
)

// TestAttributes: paths map to the kubelet's node subresources.
func TestAttributes(t *testing.T) {
	cases := []struct {
		method, path string
		verb         string
		subs         []string
	}{
		{"GET", "/pods", "get", []string{"pods", "proxy"}},
		{"GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"GET", "/configz", "get", []string{"configz", "proxy"}},
		{"GET", "/stats/summary", "get", []string{"stats"}},
		{"GET", "/metrics/resource", "get", []string{"metrics"}},
		{"GET", "/logs/", "get", []string{"log"}},
		{"GET", "/containerLogs/ns/p/c", "get", []string{"proxy"}},
		{"POST", "/exec/ns/p/c", "create", []string{"proxy"}},
		{"POST", "/run/ns/p/c", "create", []string{"proxy"}},
		{"GET", "/podsX", "get", []string{"proxy"}},
	}
	for _, c := range cases {
		attrs := attributesFor("n1", httptest.NewRequest(c.method, c.path, nil))
		if len(attrs) != len(c.subs) {
			t.Errorf("%s %s: %+v", c.method, c.path, attrs)
			continue
		}
		for i, a := range attrs {
			if a.Verb != c.verb || a.Subresource != c.subs[i] || a.Name != "n1" {
				t.Errorf("%s %s: %+v", c.method, c.path, a)
			}
		}
	}
}
