package main

import (
	"os"
	"testing"
	"time"
)

// The sampler reads this test's own process: a PSS above zero and at most
// its RSS, under the name it was given.
func TestMemSamplerReadsPSS(t *testing.T) {
	s := sampleMemory([]int{os.Getpid()}, []string{"self"}, 10*time.Millisecond)
	pss, rss, err := s.end()
	if err != nil {
		t.Fatal(err)
	}
	if pss.total <= 0 || pss.total > rss.total {
		t.Fatalf("PSS %d, RSS %d: want 0 < PSS <= RSS", pss.total, rss.total)
	}
	if pss.each["self"] != pss.total {
		t.Fatalf("PSS of self %d, total %d", pss.each["self"], pss.total)
	}
}

// A process that is gone yields no sample rather than a lower peak.
func TestMemSamplerGoneProcess(t *testing.T) {
	s := sampleMemory([]int{1 << 30}, []string{"gone"}, 10*time.Millisecond)
	if _, _, err := s.end(); err == nil {
		t.Fatal("want an error for a process that does not exist")
	}
}

func TestFigureRange(t *testing.T) {
	get := func(r *result) float64 { return r.P99Ms }
	if got := figureRange(2, []*result{{P99Ms: 2}}, get); got != "2.00" {
		t.Fatalf("one round: %q", got)
	}
	rs := []*result{{P99Ms: 3}, {P99Ms: 1}, {P99Ms: 2}}
	if got := figureRange(2, rs, get); got != "2.00 (1.00–3.00)" {
		t.Fatalf("three rounds: %q", got)
	}
}
