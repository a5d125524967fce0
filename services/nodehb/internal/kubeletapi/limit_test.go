package kubeletapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func requestFrom(addr string) *http.Request {
	r := httptest.NewRequest("GET", "/pods", nil)
	r.RemoteAddr = addr
	return r
}

// TestFailureLimiter: a source gets burst reviews at once (in flight ones
// count), only failed ones spend its bucket, it refills at qps, and other
// sources are not affected.
func TestFailureLimiter(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	l := NewFailureLimiter(1, 3, 16, nil)
	l.now = clk.Now
	x := requestFrom("10.0.0.1:1234")
	admit := func(r *http.Request) ReviewTicket {
		t.Helper()
		tk, err := l.Admit(r)
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return tk
	}
	refused := func(r *http.Request) *ThrottledError {
		t.Helper()
		_, err := l.Admit(r)
		var te *ThrottledError
		if !errors.As(err, &te) {
			t.Fatalf("admitted, want refused (err %v)", err)
		}
		return te
	}
	a1, a2, a3 := admit(x), admit(x), admit(x)
	refused(x) // three in flight speak for the whole bucket
	a1.Done(false)
	a4 := admit(x) // an authenticated review spent nothing
	a2.Done(true)
	a3.Done(true)
	a4.Done(true)
	te := refused(requestFrom("10.0.0.1:5555")) // the port is not the source
	if te.RetryAfter <= 0 || te.RetryAfter > time.Second || te.Source != "10.0.0.1" {
		t.Errorf("refusal %+v, want source 10.0.0.1 and a retry within 1s", te)
	}
	admit(requestFrom("10.0.0.2:1")).Done(true) // another source has its own bucket
	clk.Step(time.Second)
	admit(x).Done(true)
	refused(x)
}

// TestFailureLimiterBounded: the buckets are an LRU of the configured size;
// a forgotten source starts again with a full bucket.
func TestFailureLimiterBounded(t *testing.T) {
	l := NewFailureLimiter(1, 1, 4, nil)
	l.now = clocktesting.NewFakeClock(time.Unix(1000, 0)).Now
	for i := range 1000 {
		tk, err := l.Admit(requestFrom(fmt.Sprintf("10.1.%d.%d:1", i/256, i%256)))
		if err != nil {
			t.Fatalf("source %d refused: %v", i, err)
		}
		tk.Done(true)
		if n := l.Sources(); n > 4 {
			t.Fatalf("%d sources remembered, want at most 4", n)
		}
	}
	if _, err := l.Admit(requestFrom("10.1.3.231:1")); err == nil {
		t.Error("the latest source's spent bucket was forgotten")
	}
	if _, err := l.Admit(requestFrom("10.1.0.0:1")); err != nil {
		t.Errorf("a forgotten source was still refused: %v", err)
	}
}

// TestNoLimit: qps 0 is no limit.
func TestNoLimit(t *testing.T) {
	l := NewFailureLimiter(0, 10, 10, nil)
	for range 100 {
		tk, err := l.Admit(requestFrom("10.0.0.1:1"))
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(true)
	}
}

// TestSourceOf: IPv4 by address, IPv6 by its /64.
func TestSourceOf(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.0.1:443":                "10.0.0.1",
		"[::ffff:10.0.0.1]:443":       "10.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:443":  "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:8080": "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:8080":      "2001:db8:1:3::/64",
		"not-an-address":              "not-an-address",
	} {
		if got := SourceOf(requestFrom(addr)); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
}
