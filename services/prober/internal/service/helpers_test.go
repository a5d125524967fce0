package service_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func portOf(url string) int {
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	n, _ := strconv.Atoi(p)
	return n
}

// closedPort is a port on 127.0.0.1 that nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return p
}

// probeTotals sums prober_probe_total for a pod by "<probe_type>/<result>".
func probeTotals(t *testing.T, e *env, uid string) map[string]float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "prober_probe_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["pod_uid"] == uid {
				out[l["probe_type"]+"/"+l["result"]] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}
