package app_test

import (
	"net/http"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/libs/app/apptest"
)

// TestPprofOffUnlessAsked: /debug/pprof answers 404 by default and 200
// with --debug-pprof; the command line (which may hold secrets) is never
// served.
func TestPprofOffUnlessAsked(t *testing.T) {
	svc := app.Service{Name: "noop", Module: func() fx.Option { return fx.Options() }}
	client := &http.Client{Timeout: 5 * time.Second}
	status := func(addr, path string) int {
		t.Helper()
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		args  []string
		index int
	}{
		{[]string{"--node-name=pprof-node"}, http.StatusNotFound},
		{[]string{"--node-name=pprof-node", "--debug-pprof"}, http.StatusOK},
	} {
		s := apptest.Start(t, "pprof", c.args, svc)
		if got := status(s.Addr, "/debug/pprof/"); got != c.index {
			t.Errorf("%v: /debug/pprof/ answered %d, want %d", c.args, got, c.index)
		}
		if got := status(s.Addr, "/debug/pprof/cmdline"); got != http.StatusNotFound {
			t.Errorf("%v: /debug/pprof/cmdline answered %d, want 404", c.args, got)
		}
		if got := status(s.Addr, "/metrics"); got != http.StatusOK {
			t.Errorf("%v: /metrics answered %d", c.args, got)
		}
		s.Stop(t)
	}
}
