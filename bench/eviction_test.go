package main

import (
	"strings"
	"testing"
)

// TestEvictionFigures: the counters are read from nodehb's exposition, and
// the share is the loop's CPU over the CPU of the processes exporting them.
func TestEvictionFigures(t *testing.T) {
	vals, err := counters(strings.NewReader(`# HELP splitlet_nodehb_eviction_rounds_total Rounds.
# TYPE splitlet_nodehb_eviction_rounds_total counter
splitlet_nodehb_eviction_rounds_total 12
splitlet_nodehb_eviction_round_cpu_seconds_total 0.25
splitlet_nodehb_eviction_round_seconds_total 3
process_cpu_seconds_total 40
`), evictionRoundsMetric, evictionCPUMetric)
	if err != nil || vals[evictionRoundsMetric] != 12 || vals[evictionCPUMetric] != 0.25 || len(vals) != 2 {
		t.Fatalf("counters %v (%v)", vals, err)
	}
	res := &result{CPUEach: map[string]float64{"nodehb-3": 10, "podworkers-4": 90}}
	res.setEviction(evictionCost{rounds: 2, cpuSec: 0.05, procs: []string{"nodehb-3"}}, evictionCost{rounds: 12, cpuSec: 0.25, procs: []string{"nodehb-3"}})
	if res.EvictionRounds != 10 || res.EvictionStageCPUSec != 10 || res.evictionShare() < 1.99 || res.evictionShare() > 2.01 {
		t.Fatalf("rounds %g, stage CPU %g, share %g; want 10, 10, 2 %%", res.EvictionRounds, res.EvictionStageCPUSec, res.evictionShare())
	}
	none := &result{}
	none.setEviction(evictionCost{}, evictionCost{})
	if none.evictionShare() != 0 || none.EvictionCPUSec != 0 {
		t.Fatalf("an agent without the eviction manager: %+v", none)
	}
}
