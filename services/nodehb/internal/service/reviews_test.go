package service

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/nodehb/internal/kubeletapi"
)

// reviewCounter counts the TokenReviews a client sends.
type reviewCounter struct {
	mu sync.Mutex
	n  int
}

func (c *reviewCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
			c.mu.Lock()
			c.n++
			c.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (c *reviewCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTokenReviewsCachedAndLimited: against the real API server, a token is
// reviewed once while its answer is cached (good or bad); a source whose
// failed reviews are spent gets ThrottledError without a review, while its
// cached good token still authenticates and other sources are reviewed.
func TestTokenReviewsCachedAndLimited(t *testing.T) {
	testenv.SkipShort(t, "etcd and kube-apiserver")
	counter := &reviewCounter{}
	rc := rest.CopyConfig(cp.Config)
	rc.Wrap(counter.wrap)
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// One failure per 100 s: no refill while the test runs.
	authn, err := kubeletapi.NewTokenReviewAuthenticator(cs, nil, kubeletapi.NewFailureLimiter(0.01, 3, 16, nil))
	if err != nil {
		t.Fatal(err)
	}
	auth := func(src, token string) (kubeletapi.User, bool, error) {
		r, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://node/pods", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.RemoteAddr = src
		r.Header.Set("Authorization", "Bearer "+token)
		return authn.Authenticate(r)
	}
	wantReviews := func(n int, what string) {
		t.Helper()
		if got := counter.count(); got != n {
			t.Fatalf("%s: %d token reviews, want %d", what, got, n)
		}
	}
	admin := cp.Tokens[testenv.AdminUser]
	for range 5 {
		if u, ok, err := auth("10.0.0.1:1000", admin); !ok || err != nil || u.Name != testenv.AdminUser {
			t.Fatalf("admin token: %+v %v %v", u, ok, err)
		}
	}
	wantReviews(1, "a good token asked five times")
	for range 5 {
		if _, ok, err := auth("10.0.0.1:1000", "bogus-0"); ok || err != nil {
			t.Fatalf("bogus token: ok %v err %v", ok, err)
		}
	}
	wantReviews(2, "a bad token asked five times")
	for i := 1; i <= 2; i++ {
		if _, ok, err := auth("10.0.0.1:1000", fmt.Sprintf("bogus-%d", i)); ok || err != nil {
			t.Fatalf("bogus token %d: ok %v err %v", i, ok, err)
		}
	}
	wantReviews(4, "two more bad tokens, within the burst of 3")
	var throttled *kubeletapi.ThrottledError
	for i := 3; i < 10; i++ {
		if _, ok, err := auth("10.0.0.1:2000", fmt.Sprintf("bogus-%d", i)); ok || !errors.As(err, &throttled) {
			t.Fatalf("bad token %d beyond the burst: ok %v err %v, want ThrottledError", i, ok, err)
		}
	}
	wantReviews(4, "bad tokens beyond the burst")
	if _, ok, err := auth("10.0.0.1:1000", admin); !ok || err != nil {
		t.Errorf("the cached good token of a limited source: ok %v err %v", ok, err)
	}
	if _, ok, err := auth("10.0.0.2:1000", "bogus-other"); ok || err != nil {
		t.Errorf("another source's bad token: ok %v err %v", ok, err)
	}
	wantReviews(5, "another source")
}

// TestFailureLimitApplied: the keys reach the kubelet API. With a burst of
// 2 and next to no refill, a third bogus token from one address gets 429
// with Retry-After; kube-apiserver's client certificate from the same
// address is still served; with qps 0 there is no limit.
func TestFailureLimitApplied(t *testing.T) {
	s := startStack(t, "limit-node", "--nodehb.authentication-failure-qps=0.01", "--nodehb.authentication-failure-burst=2")
	base := fmt.Sprintf("https://127.0.0.1:%d", s.port)
	c := apiClient(t, nil)
	for i := range 2 {
		if code, body := get(t, c, base+"/pods", fmt.Sprintf("bogus-%d", i)); code != http.StatusUnauthorized {
			t.Fatalf("bogus token %d: %d %s, want 401", i, code, body)
		}
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/pods", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer bogus-2")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third bogus token: %d %q Retry-After %q, want 429 with Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(cp.Dir, "kubelet-client.crt"), filepath.Join(cp.Dir, "kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, apiClient(t, &cert), base+"/pods", ""); code != http.StatusOK {
		t.Errorf("client certificate from the limited address: %d %s", code, body)
	}

	s = startStack(t, "nolimit-node", "--nodehb.authentication-failure-qps=0")
	base = fmt.Sprintf("https://127.0.0.1:%d", s.port)
	for i := range 15 {
		if code, body := get(t, c, base+"/pods", fmt.Sprintf("bogus-%d", i)); code != http.StatusUnauthorized {
			t.Fatalf("no limit, bogus token %d: %d %s, want 401", i, code, body)
		}
	}
}
