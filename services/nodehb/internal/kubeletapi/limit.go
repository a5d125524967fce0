package kubeletapi

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"k8s.io/utils/lru"
)

// FailureLimiter bounds, per source address, the token reviews that do not
// authenticate. Each source has a token bucket of burst failures refilled at
// qps; a review is made only while the source has a token that its reviews
// in flight have not spoken for, so a source that sends bogus tokens gets
// 429 without a review once its bucket is empty, however many requests it
// has open. Reviews that authenticate cost nothing. The buckets live in a
// bounded LRU: a source forgotten starts again with a full bucket.
type FailureLimiter struct {
	qps   rate.Limit
	burst int
	log   *zap.Logger
	now   func() time.Time

	mu      sync.Mutex // makes a source's lookup and creation one step
	buckets *lru.Cache
}

type sourceBucket struct {
	mu      sync.Mutex
	lim     *rate.Limiter
	pending int  // reviews in flight
	refused bool // refusing since the last admission (logged once)
}

// NewFailureLimiter limits each source to burst failed reviews at once and
// qps on average, remembering at most sources sources. qps <= 0: no limit
// (nil, which admits everything).
func NewFailureLimiter(qps float64, burst, sources int, log *zap.Logger) *FailureLimiter {
	if qps <= 0 {
		return nil
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &FailureLimiter{qps: rate.Limit(qps), burst: max(burst, 1), log: log, now: time.Now, buckets: lru.New(max(sources, 1))}
}

// ReviewTicket is one admitted review; Done must be called when it ends.
type ReviewTicket struct {
	b   *sourceBucket
	now func() time.Time
}

// Done ends the review; a failed one (not authenticated, or no answer)
// spends one of the source's tokens.
func (t ReviewTicket) Done(failed bool) {
	if t.b == nil {
		return
	}
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	t.b.pending--
	if failed {
		t.b.lim.AllowN(t.now(), 1)
	}
}

// ThrottledError: the source's failed authentications are spent, so no
// review was made; the request is answered 429 with Retry-After.
type ThrottledError struct {
	Source     string
	RetryAfter time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("failed authentications from %s beyond the limit; retry after %v", e.Source, e.RetryAfter)
}

// Admit asks for one review for the request's source.
func (l *FailureLimiter) Admit(r *http.Request) (ReviewTicket, error) {
	if l == nil {
		return ReviewTicket{}, nil
	}
	src := SourceOf(r)
	b := l.bucket(src)
	now := l.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	free := b.lim.TokensAt(now) - float64(b.pending)
	if free < 1 {
		if !b.refused {
			b.refused = true
			l.log.Warn("failed authentications beyond the limit; answering 429 without token reviews",
				zap.String("source", src), zap.Float64("qps", float64(l.qps)), zap.Int("burst", l.burst))
		}
		wait := time.Duration(math.Ceil((1 - free) / float64(l.qps) * float64(time.Second)))
		return ReviewTicket{}, &ThrottledError{Source: src, RetryAfter: wait}
	}
	b.refused = false
	b.pending++
	return ReviewTicket{b: b, now: l.now}, nil
}

// Sources is how many sources are remembered now.
func (l *FailureLimiter) Sources() int {
	if l == nil {
		return 0
	}
	return l.buckets.Len()
}

func (l *FailureLimiter) bucket(src string) *sourceBucket {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := l.buckets.Get(src); ok {
		return v.(*sourceBucket)
	}
	b := &sourceBucket{lim: rate.NewLimiter(l.qps, l.burst)}
	l.buckets.Add(src, b)
	return b
}

// SourceOf is the request's source as the limiter counts it: the client's
// IPv4 address, or the /64 of an IPv6 one (one host commonly holds a whole
// /64, so counting its addresses apart would multiply its budget).
func SourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}
