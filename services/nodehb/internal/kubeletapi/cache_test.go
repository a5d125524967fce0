package kubeletapi

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func keyN(i int) [sha256.Size]byte {
	var k [sha256.Size]byte
	binary.BigEndian.PutUint64(k[:], uint64(i))
	return k
}

// TestReviewCacheBounded: however many answers come, each kind keeps at
// most its size, and a flood of negative answers does not evict positive
// ones.
func TestReviewCacheBounded(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := newReviewCache[tokenAnswer](8, AuthenticatedTTL, UnauthenticatedTTL, clk)
	for i := range 4 {
		c.put(keyN(i), tokenAnswer{user: User{Name: "good"}, ok: true}, true)
	}
	for i := 100; i < 100_000; i++ {
		c.put(keyN(i), tokenAnswer{}, false)
		if i%1000 == 0 && c.len() > 16 {
			t.Fatalf("%d answers kept, want at most 16", c.len())
		}
	}
	if n := len(c.neg.Keys()); n != 8 {
		t.Errorf("%d negative answers kept, want 8", n)
	}
	for i := range 4 {
		if ans, ok := c.get(keyN(i)); !ok || !ans.ok {
			t.Errorf("positive answer %d evicted by negative ones", i)
		}
	}
	if _, ok := c.get(keyN(100)); ok {
		t.Error("the oldest negative answer was kept beyond the size")
	}
	if _, ok := c.get(keyN(99_999)); !ok {
		t.Error("the newest negative answer was not kept")
	}
}

// TestReviewCacheTTL: the kubelet's TTLs, per kind of answer.
func TestReviewCacheTTL(t *testing.T) {
	for _, tc := range []struct {
		name           string
		posTTL, negTTL time.Duration
	}{
		{"authentication", AuthenticatedTTL, UnauthenticatedTTL},
		{"authorization", AuthorizedTTL, UnauthorizedTTL},
	} {
		clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
		c := newReviewCache[bool](16, tc.posTTL, tc.negTTL, clk)
		pos, neg := keyN(1), keyN(2)
		c.put(pos, true, true)
		c.put(neg, false, false)
		clk.Step(tc.negTTL)
		if _, ok := c.get(neg); !ok {
			t.Errorf("%s: negative answer gone at its TTL", tc.name)
		}
		clk.Step(time.Millisecond)
		if _, ok := c.get(neg); ok {
			t.Errorf("%s: negative answer kept beyond %v", tc.name, tc.negTTL)
		}
		if _, ok := c.get(pos); !ok {
			t.Errorf("%s: positive answer gone after %v", tc.name, tc.negTTL)
		}
		clk.Step(tc.posTTL - tc.negTTL)
		if _, ok := c.get(pos); ok {
			t.Errorf("%s: positive answer kept beyond %v", tc.name, tc.posTTL)
		}
	}
	if AuthenticatedTTL != 2*time.Minute || UnauthenticatedTTL != 30*time.Second || AuthorizedTTL != 5*time.Minute || UnauthorizedTTL != 30*time.Second {
		t.Error("TTLs differ from the kubelet's webhook defaults")
	}
}

// TestReviewCacheAnswerChanges: a key answered anew keeps only the new
// answer, whichever kind it is.
func TestReviewCacheAnswerChanges(t *testing.T) {
	c := newReviewCache[bool](4, time.Minute, time.Minute, nil)
	c.put(keyN(1), false, false)
	c.put(keyN(1), true, true)
	if v, ok := c.get(keyN(1)); !ok || !v {
		t.Errorf("got %v %v, want the positive answer", v, ok)
	}
	c.put(keyN(1), false, false)
	if v, ok := c.get(keyN(1)); !ok || v {
		t.Errorf("got %v %v, want the negative answer", v, ok)
	}
}

// TestSARKeyUnambiguous: users whose fields would join alike get
// different keys.
func TestSARKeyUnambiguous(t *testing.T) {
	a := Attributes{Verb: "get", Subresource: "proxy", Name: "n"}
	k1, err := sarKey(User{Name: "u", Groups: []string{"a,b"}}, a)
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := sarKey(User{Name: "u", Groups: []string{"a", "b"}}, a)
	k3, _ := sarKey(User{Name: "u", Groups: []string{"a", "b"}}, Attributes{Verb: "get", Subresource: "log", Name: "n"})
	if k1 == k2 || k2 == k3 {
		t.Error("different reviews share a cache key")
	}
}
