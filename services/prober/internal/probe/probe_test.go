package probe

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/libs/kube"
)

func hostPort(t *testing.T, rawURL string) (string, int) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	return u.Hostname(), port
}

func TestResolvePort(t *testing.T) {
	c := &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	cases := []struct {
		port    intstr.IntOrString
		want    int
		wantErr string
	}{
		{intstr.FromInt32(80), 80, ""},
		{intstr.FromString("http"), 8080, ""},
		{intstr.FromString("9090"), 9090, ""},
		{intstr.FromString("nope"), -1, `port "nope" not found in container "app"`},
		{intstr.FromInt32(0), 0, "invalid port number: 0"},
		{intstr.FromInt32(70000), 70000, "invalid port number: 70000"},
	}
	for _, tc := range cases {
		got, err := kube.ResolvePort(tc.port, c)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("ResolvePort(%v) error %v, want %q", tc.port.String(), err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ResolvePort(%v) = %d, %v; want %d", tc.port.String(), got, err, tc.want)
		}
	}
}

func TestHTTP(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var other *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("User-Agent") != UserAgent || r.Header.Get("X-Probe") != "yes" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "ua %q, x-probe %q", r.Header.Get("User-Agent"), r.Header.Get("X-Probe"))
			return
		}
		fmt.Fprint(w, "fine")
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	mux.HandleFunc("/local-redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/local-redirect-bad", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/fail", http.StatusFound) })
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/offhost", func(w http.ResponseWriter, r *http.Request) {
		// localhost is another host name than 127.0.0.1 for the probe.
		_, port := hostPort(t, other.URL)
		http.Redirect(w, r, "http://localhost:"+strconv.Itoa(port)+"/ok", http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	other = srv
	host, port := hostPort(t, srv.URL)
	c := &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}
	p := NewHTTP()

	cases := []struct {
		path    string
		want    Result
		outHas  string
		timeout time.Duration
	}{
		{"/ok", Success, "fine", time.Second},
		{"/fail", Failure, "HTTP probe failed with statuscode: 500", time.Second},
		{"/local-redirect", Success, "fine", time.Second},
		{"/local-redirect-bad", Failure, "statuscode: 500", time.Second},
		{"/loop", Failure, "stopped after 10 redirects", time.Second},
		{"/offhost", Warning, "Probe terminated redirects", time.Second},
		{"/slow", Failure, "Client.Timeout", 200 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			action := &corev1.HTTPGetAction{Path: tc.path, Port: intstr.FromString("web"),
				HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "yes"}}}
			req, err := Request(action, c, host)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			got, out := p.Probe(t.Context(), req, tc.timeout)
			if got != tc.want || !strings.Contains(out, tc.outHas) {
				t.Errorf("probe %s = %v %q; want %v containing %q", tc.path, got, out, tc.want, tc.outHas)
			}
			if elapsed := time.Since(start); elapsed > tc.timeout+2*time.Second {
				t.Errorf("probe took %v with a timeout of %v", elapsed, tc.timeout)
			}
		})
	}

	t.Run("unknown port name", func(t *testing.T) {
		_, err := Request(&corev1.HTTPGetAction{Port: intstr.FromString("nope")}, c, host)
		if err == nil || !strings.Contains(err.Error(), `"nope" not found`) {
			t.Errorf("error %v, want port not found", err)
		}
	})
	t.Run("empty accept header removes it", func(t *testing.T) {
		req, err := Request(&corev1.HTTPGetAction{Port: intstr.FromInt32(1), HTTPHeaders: []corev1.HTTPHeader{{Name: "Accept", Value: ""}}}, c, host)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := req.Header["Accept"]; ok {
			t.Errorf("Accept header kept: %v", req.Header)
		}
		if req.URL.String() != "http://"+host+":1" {
			t.Errorf("url %s", req.URL)
		}
	})
}

func freeClosedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

func TestTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	if r, out := TCP(t.Context(), "127.0.0.1", l.Addr().(*net.TCPAddr).Port, time.Second); r != Success {
		t.Errorf("open port: %v %q", r, out)
	}
	if r, out := TCP(t.Context(), "127.0.0.1", freeClosedPort(t), time.Second); r != Failure || !strings.Contains(out, "refused") {
		t.Errorf("closed port: %v %q, want a refused failure", r, out)
	}
}

func TestGRPC(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	port := l.Addr().(*net.TCPAddr).Port

	if r, out := GRPC(t.Context(), "127.0.0.1", "", port, time.Second); r != Success {
		t.Errorf("serving: %v %q", r, out)
	}
	if r, out := GRPC(t.Context(), "127.0.0.1", "db", port, time.Second); r != Failure || !strings.Contains(out, "NOT_SERVING") {
		t.Errorf("not serving: %v %q", r, out)
	}
	if r, out := GRPC(t.Context(), "127.0.0.1", "nosuch", port, time.Second); r != Failure {
		t.Errorf("unknown service: %v %q", r, out)
	}
	start := time.Now()
	if r, out := GRPC(t.Context(), "127.0.0.1", "", freeClosedPort(t), 500*time.Millisecond); r != Failure {
		t.Errorf("closed port: %v %q", r, out)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("closed port probe took %v", time.Since(start))
	}

	// A plain TCP listener that never speaks: the probe times out.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	if r, out := GRPC(t.Context(), "127.0.0.1", "", mute.Addr().(*net.TCPAddr).Port, 300*time.Millisecond); r != Failure || !strings.Contains(out, "timeout") {
		t.Errorf("mute server: %v %q, want a timeout failure", r, out)
	}
}

type fakeRunner struct {
	out *ExecOutcome
	err error
}

func (f fakeRunner) RunInContainer(context.Context, []string, time.Duration) (*ExecOutcome, error) {
	return f.out, f.err
}

func TestExec(t *testing.T) {
	cases := []struct {
		name string
		r    fakeRunner
		want Result
		out  string
		err  bool
	}{
		{"exit 0", fakeRunner{out: &ExecOutcome{Output: []byte("ok")}}, Success, "ok", false},
		{"exit 1", fakeRunner{out: &ExecOutcome{Output: []byte("bad"), ExitCode: 1}}, Failure, "bad", false},
		{"could not run", fakeRunner{out: &ExecOutcome{Error: "no such container"}}, Failure, "no such container", false},
		{"timed out", fakeRunner{err: ErrTimedOut}, Failure, "timed out after 1s", false},
		{"no runtime", fakeRunner{err: fmt.Errorf("no responders")}, Unknown, "", true},
	}
	for _, tc := range cases {
		r, out, err := Exec(t.Context(), tc.r, []string{"true"}, time.Second)
		if r != tc.want || !strings.Contains(out, tc.out) || (err != nil) != tc.err {
			t.Errorf("%s: %v %q %v; want %v %q err=%v", tc.name, r, out, err, tc.want, tc.out, tc.err)
		}
	}
}
