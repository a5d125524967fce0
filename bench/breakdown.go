package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// histogram is one series of a Prometheus histogram, summed over the
// processes that export it: cumulative counts by upper bound.
type histogram struct {
	le     []float64
	counts []float64
}

func (h *histogram) add(le, count float64) {
	i, found := slices.BinarySearch(h.le, le)
	if !found {
		h.le = slices.Insert(h.le, i, le)
		h.counts = slices.Insert(h.counts, i, 0)
	}
	h.counts[i] += count
}

// quantile estimates the q-quantile (seconds), interpolating within a
// bucket as Prometheus's histogram_quantile does.
func (h *histogram) quantile(q float64) float64 {
	if len(h.counts) == 0 {
		return math.NaN()
	}
	total := h.counts[len(h.counts)-1]
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	prevLe, prevCount := 0.0, 0.0
	for i, c := range h.counts {
		if c >= rank {
			if math.IsInf(h.le[i], 1) {
				return prevLe
			}
			if c == prevCount {
				return h.le[i]
			}
			return prevLe + (h.le[i]-prevLe)*(rank-prevCount)/(c-prevCount)
		}
		prevLe, prevCount = h.le[i], c
	}
	return prevLe
}

// scrapeHistograms reads the named histogram's buckets from each address's
// /metrics and sums them by the label given (stage, stream).
func scrapeHistograms(ctx context.Context, addrs []string, name, label string) (map[string]*histogram, error) {
	out := map[string]*histogram{}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, addr := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		err = parseBuckets(resp.Body, name, label, out)
		_ = resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", addr, err)
		}
	}
	return out, nil
}

// parseBuckets reads lines name_bucket{label="v",le="x"} n.
func parseBuckets(r io.Reader, name, label string, out map[string]*histogram) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	prefix := name + "_bucket{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		labels := labelValues(line[len(prefix):end])
		count, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			continue
		}
		le, err := strconv.ParseFloat(labels["le"], 64)
		if err != nil {
			continue
		}
		key := labels[label]
		h := out[key]
		if h == nil {
			h = &histogram{}
			out[key] = h
		}
		h.add(le, count)
	}
	return sc.Err()
}

// labelValues parses a="x",b="y" (values without escaped quotes).
func labelValues(s string) map[string]string {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if ok {
			out[strings.TrimSpace(k)] = strings.Trim(v, `"`)
		}
	}
	return out
}

// stageShares are the per-stage figures of a Splitlet run: each stage's
// and each bus hop's median and p99 (ms).
type stageShares struct {
	P50Ms map[string]float64 `json:"p50Ms"`
	P99Ms map[string]float64 `json:"p99Ms"`
}

// readBreakdown scrapes the run's processes for the stages' and the bus's
// histograms. The bus hops on a pod's way to running are the pod update
// (podconfig → pod workers) and the runtime status (pod workers →
// statussync).
func readBreakdown(ctx context.Context, run *agentRun) (*stageShares, error) {
	var addrs []string
	for _, a := range run.health {
		addrs = append(addrs, a)
	}
	stages, err := scrapeHistograms(ctx, addrs, "splitlet_pod_stage_duration_seconds", "stage")
	if err != nil {
		return nil, err
	}
	hops, err := scrapeHistograms(ctx, addrs, "splitlet_bus_delivery_seconds", "stream")
	if err != nil {
		return nil, err
	}
	s := &stageShares{P50Ms: map[string]float64{}, P99Ms: map[string]float64{}}
	put := func(name string, h *histogram) {
		if h == nil {
			return
		}
		if v := h.quantile(0.5); !math.IsNaN(v) {
			s.P50Ms[name], s.P99Ms[name] = v*1000, h.quantile(0.99)*1000
		}
	}
	for _, st := range []string{"podconfig", "podworkers", "statussync"} {
		put(st, stages[st])
	}
	put("bus: podupdates", hops["podupdates"])
	put("bus: podstatus", hops["podstatus"])
	return s, nil
}

// breakdownOrder is the order of a pod's way to running.
var breakdownOrder = []string{"podconfig", "bus: podupdates", "podworkers", "bus: podstatus", "statussync"}

// printBreakdown prints, for each Splitlet run, the median and p99 of each
// stage and bus hop and their share of create→Ready's median and p99 (what
// is left is the API server: the create, the watch to podconfig, the
// status patch and its watch to the client).
func printBreakdown(out io.Writer, order []string, r map[string]*result) {
	for _, name := range order {
		res := r[name]
		if res == nil || res.Stages == nil {
			continue
		}
		fmt.Fprintf(out, "\n| %s: where create→Ready goes | p50 (ms) | share of p50 (%.0f ms) | p99 (ms) | share of p99 (%.0f ms) |\n|---|---|---|---|---|\n",
			name, res.P50Ms, res.P99Ms)
		sum50, sum99 := 0.0, 0.0
		for _, st := range breakdownOrder {
			p50, ok := res.Stages.P50Ms[st]
			if !ok {
				continue
			}
			p99 := res.Stages.P99Ms[st]
			sum50, sum99 = sum50+p50, sum99+p99
			fmt.Fprintf(out, "| %s | %.1f | %.0f %% | %.1f | %.0f %% |\n", st, p50, 100*p50/res.P50Ms, p99, 100*p99/res.P99Ms)
		}
		fmt.Fprintf(out, "| the rest (API server: create, watches, status patch) | %.1f | %.0f %% | – | – |\n",
			max(res.P50Ms-sum50, 0), 100*max(res.P50Ms-sum50, 0)/res.P50Ms)
	}
}
