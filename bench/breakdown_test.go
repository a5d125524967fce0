package main

import (
	"math"
	"strings"
	"testing"
)

func TestHistogramQuantileAcrossProcesses(t *testing.T) {
	// two processes' exports of one stage: 10 observations in (0, 0.1],
	// 10 in (0.1, 0.2]; the median is 0.1, the 99th percentile near 0.2.
	out := map[string]*histogram{}
	for _, text := range []string{
		`splitlet_pod_stage_duration_seconds_bucket{stage="podworkers",le="0.1"} 5
splitlet_pod_stage_duration_seconds_bucket{stage="podworkers",le="0.2"} 10
splitlet_pod_stage_duration_seconds_bucket{stage="podworkers",le="+Inf"} 10
splitlet_pod_stage_duration_seconds_sum{stage="podworkers"} 1.5`,
		`splitlet_pod_stage_duration_seconds_bucket{stage="podworkers",le="0.1"} 5
splitlet_pod_stage_duration_seconds_bucket{stage="podworkers",le="0.2"} 10
splitlet_pod_stage_duration_seconds_bucket{stage="podworkers",le="+Inf"} 10
splitlet_pod_stage_duration_seconds_bucket{stage="statussync",le="0.1"} 0`,
	} {
		if err := parseBuckets(strings.NewReader(text), "splitlet_pod_stage_duration_seconds", "stage", out); err != nil {
			t.Fatal(err)
		}
	}
	h := out["podworkers"]
	if q := h.quantile(0.5); math.Abs(q-0.1) > 1e-9 {
		t.Errorf("median %v, want 0.1", q)
	}
	if q := h.quantile(0.99); math.Abs(q-0.198) > 1e-9 {
		t.Errorf("p99 %v, want 0.198", q)
	}
	if q := out["statussync"].quantile(0.5); !math.IsNaN(q) {
		t.Errorf("an empty histogram's median is %v, want NaN", q)
	}
}
