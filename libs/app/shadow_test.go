package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/splitlet/splitlet/libs/config"
)

// The shadow key: a stage with a shadow mode connects as its shadow
// identity; a stage without one, or a shadow with no live bus to read, is
// refused before anything starts.
func TestShadowKey(t *testing.T) {
	if got := busIdentity([]Service{{Name: "tcpprober", Identity: "prober", Shadow: true}}, true); got != "shadow-prober" {
		t.Errorf("shadow identity %q, want shadow-prober", got)
	}
	common := &config.Common{Shadow: true}
	if err := checkShadow(common, []Service{{Name: "prober", Shadow: true}, {Name: "statussync"}}); err == nil || !strings.Contains(err.Error(), "statussync has no shadow mode") {
		t.Errorf("a stage without a shadow mode: %v", err)
	}
	if err := checkShadow(common, []Service{{Name: "prober", Shadow: true}}); err != nil {
		t.Errorf("a stage with one: %v", err)
	}
	var out strings.Builder
	code := Run(t.Context(), "x", []string{"--shadow", "--node-name=n"}, &out, Service{Name: "prober", Shadow: true})
	if code != 2 || !strings.Contains(out.String(), "nats-url is required") {
		t.Errorf("a shadow without nats-url: exit %d: %s", code, out.String())
	}
	out.Reset()
	code = Run(t.Context(), "x", []string{"--shadow", "--node-name=n", "--nats-url=nats://127.0.0.1:1"}, &out, Service{Name: "statussync"})
	if code != 2 || !strings.Contains(out.String(), "no shadow mode") {
		t.Errorf("a stage without a shadow mode: exit %d: %s", code, out.String())
	}
}

// A shadow's API client reads and writes nothing: every request but GET
// and HEAD is refused in the process, before it leaves.
func TestShadowAPIReadOnly(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = append(seen, r.Method) }))
	defer srv.Close()
	rt := readOnly{http.DefaultTransport}
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequestWithContext(t.Context(), m, srv.URL+"/api/v1/namespaces/default/events", nil)
		resp, err := rt.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		if read := m == http.MethodGet || m == http.MethodHead; read != (err == nil) {
			t.Errorf("%s: err %v", m, err)
		}
	}
	if strings.Join(seen, ",") != "GET,HEAD" {
		t.Errorf("the API server saw %v, want GET and HEAD alone", seen)
	}
}
