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

func TestMedian(t *testing.T) {
	rs := []*result{{AllReadySec: 3, P99Ms: 10, PeakRSSBytes: 300, FileRSSBytes: 30}, {AllReadySec: 1, P99Ms: 30, PeakRSSBytes: 100, FileRSSBytes: 10}, {AllReadySec: 2, P99Ms: 20, PeakRSSBytes: 200, FileRSSBytes: 20}}
	m := median(rs)
	if m.AllReadySec != 2 || m.P99Ms != 20 || m.PeakRSSBytes != 200 || m.FileRSSBytes != 20 {
		t.Fatalf("median of three: %+v", m)
	}
	if m := median(rs[:2]); m.AllReadySec != 2 || m.P99Ms != 20 {
		t.Fatalf("median of two: %+v", m)
	}
	if rs[0].AllReadySec != 3 {
		t.Fatal("median changed a round's figures")
	}
}

func TestStatusKiB(t *testing.T) {
	status := "Name:\tstatussync\nVmPeak:\t 1000 kB\nVmHWM:\t  196000 kB\nVmRSS:\t  150000 kB\nRssAnon:\t  108000 kB\nRssFile:\t   42000 kB\nThreads:\t9\n"
	kib, err := statusKiB(status, "VmHWM", "RssFile")
	if err != nil || kib["VmHWM"] != 196000 || kib["RssFile"] != 42000 || len(kib) != 2 {
		t.Fatalf("statusKiB = %v, %v", kib, err)
	}
	if _, err := statusKiB(status, "VmHWM", "RssShmemX"); err == nil {
		t.Fatal("a missing field was not an error")
	}
	if _, err := statusKiB("VmHWM:\t12 MB\n", "VmHWM"); err == nil {
		t.Fatal("a field in another unit was not an error")
	}
}
