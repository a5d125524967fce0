package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

const kubeconfigYAML = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`

func TestRESTConfigContentType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfigYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, content, accept string }{
		{"application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf,application/json"},
		{"application/json", "application/json", ""},
		{"", "", ""},
	} {
		cfg, err := RESTConfig(path, 5, 10, "ua", tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ContentType != tc.content || cfg.AcceptContentTypes != tc.accept {
			t.Errorf("%q: content %q accept %q, want %q and %q", tc.in, cfg.ContentType, cfg.AcceptContentTypes, tc.content, tc.accept)
		}
		if cfg.QPS != 5 || cfg.Burst != 10 || cfg.UserAgent != "ua" || cfg.Host != "https://127.0.0.1:6443" {
			t.Errorf("%q: config %+v", tc.in, cfg)
		}
	}
}

// TestOwnClientsDoNotShareTheLimiter: a client built from HeartbeatConfig or
// OwnLimiterConfig does not wait on base's rate limiter (here one that
// refuses every call), and base is left as it was.
func TestOwnClientsDoNotShareTheLimiter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default"}}`))
	}))
	defer srv.Close()
	never := flowcontrol.NewFakeNeverRateLimiter()
	base := &rest.Config{Host: srv.URL, QPS: 5, Burst: 10, RateLimiter: never}
	get := func(cfg *rest.Config) error {
		cs, err := Clientset(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{})
		return err
	}
	if err := get(base); err == nil {
		t.Fatal("the base client got through a limiter that refuses every call")
	}
	hb := HeartbeatConfig(base, 3*time.Second)
	if err := get(hb); err != nil {
		t.Errorf("heartbeat client: %v", err)
	}
	if hb.QPS >= 0 || hb.Timeout != 3*time.Second {
		t.Errorf("heartbeat config: QPS %v timeout %v, want unthrottled and 3s", hb.QPS, hb.Timeout)
	}
	own := OwnLimiterConfig(base)
	if err := get(own); err != nil {
		t.Errorf("client with its own limiter: %v", err)
	}
	if own.QPS != 5 || own.Burst != 10 {
		t.Errorf("own limiter at %v/%d, want base's 5/10", own.QPS, own.Burst)
	}
	if base.RateLimiter != never || base.QPS != 5 || base.Timeout != 0 {
		t.Errorf("base changed: %+v", base)
	}
}

// TestHeartbeatConfigTimesOut: a heartbeat request the API server does not
// answer ends after the timeout.
func TestHeartbeatConfigTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	cs, err := Clientset(HeartbeatConfig(&rest.Config{Host: srv.URL}, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// The test's own bound, far beyond the heartbeat's.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	if err == nil {
		t.Fatal("a request the server never answered succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the request ended after %v, want about 200ms", took)
	}
}
