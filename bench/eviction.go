package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The eviction manager's cost as nodehb exports it (docs/metrics.md).
const (
	evictionRoundsMetric = "splitlet_nodehb_eviction_rounds_total"
	evictionCPUMetric    = "splitlet_nodehb_eviction_round_cpu_seconds_total"
)

// evictionCost is what the eviction manager's rounds cost so far, and the
// processes that run it (those exporting the counters).
type evictionCost struct {
	rounds, cpuSec float64
	procs          []string
}

// evictionCost reads the counters from each Splitlet process's /metrics.
func (r *agentRun) evictionCost(ctx context.Context) (evictionCost, error) {
	var out evictionCost
	client := &http.Client{Timeout: 10 * time.Second}
	for proc, addr := range r.health {
		if proc == "nats-server" {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			return out, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return out, err
		}
		vals, err := counters(resp.Body, evictionRoundsMetric, evictionCPUMetric)
		_ = resp.Body.Close()
		if err != nil {
			return out, err
		}
		if rounds, ok := vals[evictionRoundsMetric]; ok {
			out.rounds += rounds
			out.cpuSec += vals[evictionCPUMetric]
			out.procs = append(out.procs, proc)
		}
	}
	return out, nil
}

// counters reads the values of the named label-less series.
func counters(r io.Reader, names ...string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
					out[n] = v
				}
			}
		}
	}
	return out, sc.Err()
}

// setEviction fills the result's eviction figures from the counters at
// the first create and now, and the CPU of the processes running the
// eviction manager over the same window (res.CPUEach).
func (res *result) setEviction(atCreate, now evictionCost) {
	if len(now.procs) == 0 {
		return
	}
	res.EvictionRounds = now.rounds - atCreate.rounds
	res.EvictionCPUSec = now.cpuSec - atCreate.cpuSec
	for _, p := range now.procs {
		res.EvictionStageCPUSec += res.CPUEach[p]
	}
}

// evictionShare is the eviction loop's CPU as a share of its stage's (%).
func (res *result) evictionShare() float64 {
	if res.EvictionStageCPUSec == 0 {
		return 0
	}
	return 100 * res.EvictionCPUSec / res.EvictionStageCPUSec
}
