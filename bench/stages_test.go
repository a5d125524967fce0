package main

import "testing"

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkCreateToReady-2   	       1	1234567 ns/op	         1.000 writes/pod
BenchmarkProbeRate/tcp-2   	       1	10000 ns/op	  9987 probes/s	 0.13 drift-%
PASS`
	m := parseBench(out)
	if m["writes/pod"] != 1 || m["probes/s"] != 9987 || m["drift-%"] != 0.13 || m["ns/op"] != 10000 {
		t.Fatalf("parsed %v", m)
	}
}

func TestPercentile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if pct(s, 50) != 5 || pct(s, 90) != 9 || pct(s, 99) != 10 {
		t.Fatalf("p50 %v p90 %v p99 %v", pct(s, 50), pct(s, 90), pct(s, 99))
	}
}
