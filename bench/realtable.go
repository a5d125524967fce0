package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// ratioRow is one figure of a table with each agent's value over the
// kubelet's, and the targets of those ratios (agent → at most; none: no
// target).
type ratioRow[T any] struct {
	name   string
	get    func(T) float64
	target map[string]float64
}

// ratioPeer is the agent every other is compared with.
const ratioPeer = "kubelet"

// realRows are the figures of a real-container case's table, with the
// targets: the all-in-one's CPU at most 0.3 × the kubelet's, its PSS 0.75
// ×, its time to all Ready and p99 0.8 ×; the split's CPU 0.6 ×, its PSS
// 1.5 ×; every Splitlet's full teardown 0.5 ×.
var realRows = []ratioRow[*realCaseResult]{
	{"time to all Running+Ready (s)", func(r *realCaseResult) float64 { return r.AllReadySec }, map[string]float64{"allinone": 0.8}},
	{"create→Ready p50 (ms)", func(r *realCaseResult) float64 { return r.P50Ms }, nil},
	{"create→Ready p99 (ms)", func(r *realCaseResult) float64 { return r.P99Ms }, map[string]float64{"allinone": 0.8}},
	{"create→Ready max (ms)", func(r *realCaseResult) float64 { return r.MaxMs }, nil},
	{"all gone from the API after DeleteCollection (s)", func(r *realCaseResult) float64 { return r.AllGoneSec }, nil},
	{"every sandbox stopped, from DeleteCollection (s)", func(r *realCaseResult) float64 { return r.SandboxesStoppedSec }, nil},
	{"every sandbox stopped and removed: full teardown (s)", func(r *realCaseResult) float64 { return r.SandboxesRemovedSec }, map[string]float64{"allinone": 0.5, "split": 0.5}},
	{"agent CPU, first create → teardown done (s)", func(r *realCaseResult) float64 { return r.AgentCPUSec }, map[string]float64{"allinone": 0.3, "split": 0.6}},
	{"agent CPU, first create → all Ready (s)", func(r *realCaseResult) float64 { return r.CPUToReadySec }, nil},
	{"agent CPU, first create → every sandbox stopped (s)", func(r *realCaseResult) float64 { return r.CPUToStoppedSec }, nil},
	{"containerd CPU, same window (s)", func(r *realCaseResult) float64 { return r.ContainerdCPUSec }, nil},
	{"containerd shims' CPU, same window (s)", func(r *realCaseResult) float64 { return r.ShimsCPUSec }, nil},
	{"agent peak PSS, summed (MiB)", func(r *realCaseResult) float64 { return float64(r.PeakPSSBytes) / (1 << 20) }, map[string]float64{"allinone": 0.75, "split": 1.5}},
	{"API writes per pod to pods, create→Ready", func(r *realCaseResult) float64 { return r.PodWritesPerPod }, nil},
	{"API writes per pod, all resources, create→Ready", func(r *realCaseResult) float64 { return r.AllWritesPerPod }, nil},
	{"API writes per pod, all resources, create→all gone", func(r *realCaseResult) float64 { return r.AllWritesPerPodCycle }, nil},
}

// idleRows are the idle case's figures; the target: a Splitlet's CPU a
// minute at most 0.3 × the kubelet's.
var idleRows = []ratioRow[*realIdleResult]{
	{"agent CPU per minute (s)", func(r *realIdleResult) float64 { return r.AgentCPUPerMin }, map[string]float64{"allinone": 0.3, "split": 0.3}},
	{"containerd and shims' CPU per minute (s)", func(r *realIdleResult) float64 { return r.RuntimeCPUPerMin }, nil},
	{"agent peak PSS, summed (MiB)", func(r *realIdleResult) float64 { return float64(r.PeakPSSBytes) / (1 << 20) }, nil},
	{"API writes per minute, all resources", func(r *realIdleResult) float64 { return r.WritesPerMin }, nil},
}

// spread is the median of a figure over an agent's rounds, and its
// min–max; a wait that did not end in any round makes the median one that
// did not end.
func spread[T any](rs []T, get func(T) float64) (med, lo, hi float64) {
	vals := make([]float64, len(rs))
	for i, r := range rs {
		if vals[i] = get(r); vals[i] < 0 {
			return -1, -1, -1
		}
	}
	return medianOf(vals), slices.Min(vals), slices.Max(vals)
}

// cell prints an agent's median figure, with its rounds' min–max when
// there were several.
func cell[T any](rs []T, get func(T) float64) string {
	med, lo, hi := spread(rs, get)
	if len(rs) < 2 || med < 0 {
		return figure(med)
	}
	return fmt.Sprintf("%s (%s–%s)", figure(med), figure(lo), figure(hi))
}

// printRatioTable prints rows for the agents (in order), each agent's
// figure (the median over its rounds) over the kubelet's, and the targets
// with whether each is met.
func printRatioTable[T any](out io.Writer, agents []string, byAgent map[string][]T, rows []ratioRow[T]) {
	_, hasPeer := byAgent[ratioPeer]
	var others []string
	for _, a := range agents {
		if a != ratioPeer {
			others = append(others, a)
		}
	}
	head, sep := "| figure |", "|---|"
	for _, a := range agents {
		head, sep = head+" "+a+" |", sep+"---|"
	}
	if hasPeer {
		for _, a := range others {
			head, sep = head+fmt.Sprintf(" %s/%s |", a, ratioPeer), sep+"---|"
		}
		head, sep = head+" target |", sep+"---|"
	}
	fmt.Fprintln(out, head)
	fmt.Fprintln(out, sep)
	for _, row := range rows {
		line := "| " + row.name + " |"
		for _, a := range agents {
			line += " " + cell(byAgent[a], row.get) + " |"
		}
		if hasPeer {
			peer, _, _ := spread(byAgent[ratioPeer], row.get)
			var verdicts []string
			for _, a := range others {
				med, _, _ := spread(byAgent[a], row.get)
				r, ok := ratio(med, peer)
				if !ok {
					line += " – |"
				} else {
					line += fmt.Sprintf(" %.2f |", r)
				}
				if t, has := row.target[a]; has {
					verdicts = append(verdicts, targetVerdict(a, r, ok, t))
				}
			}
			line += " " + strings.Join(verdicts, "; ") + " |"
		}
		fmt.Fprintln(out, line)
	}
}

// figure prints a value; a negative one is a wait that did not end.
func figure(v float64) string {
	switch {
	case v < 0:
		return "not within the wait"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// ratio is v over the peer's; none when either did not end or the peer's
// is 0.
func ratio(v, peer float64) (float64, bool) {
	if v < 0 || peer <= 0 {
		return 0, false
	}
	return v / peer, true
}

// targetVerdict says whether agent's ratio meets "at most t".
func targetVerdict(agent string, r float64, ok bool, t float64) string {
	switch {
	case !ok:
		return fmt.Sprintf("%s ≤ %.2g: –", agent, t)
	case r <= t:
		return fmt.Sprintf("%s ≤ %.2g: met", agent, t)
	default:
		return fmt.Sprintf("%s ≤ %.2g: missed", agent, t)
	}
}

// caseKey groups the cases of one table: a variant at a pod count.
type caseKey struct {
	variant string
	pods    int
}

// caseGroups sorts the cases by variant and pod count, in the order they
// first ran, and each group's rounds by agent, with the agents in the
// order they first ran.
func caseGroups(cases []*realCaseResult) (keys []caseKey, groups map[caseKey]map[string][]*realCaseResult, agents map[caseKey][]string) {
	groups, agents = map[caseKey]map[string][]*realCaseResult{}, map[caseKey][]string{}
	for _, c := range cases {
		k := caseKey{c.Variant, c.Pods}
		if groups[k] == nil {
			keys = append(keys, k)
			groups[k] = map[string][]*realCaseResult{}
		}
		if _, seen := groups[k][c.Agent]; !seen {
			agents[k] = append(agents[k], c.Agent)
		}
		groups[k][c.Agent] = append(groups[k][c.Agent], c)
	}
	return keys, groups, agents
}

// idleGroups sorts the idle results by agent, in the order they ran.
func idleGroups(idle []*realIdleResult) (order []string, byAgent map[string][]*realIdleResult) {
	byAgent = map[string][]*realIdleResult{}
	for _, r := range idle {
		if _, seen := byAgent[r.Agent]; !seen {
			order = append(order, r.Agent)
		}
		byAgent[r.Agent] = append(byAgent[r.Agent], r)
	}
	return order, byAgent
}

// printRealTables prints a table for each variant and pod count, in the
// order they ran, and the idle table; a figure is the median of the
// agent's rounds.
func printRealTables(out io.Writer, rep *realReport) {
	keys, groups, agents := caseGroups(rep.Cases)
	for _, k := range keys {
		rounds := len(groups[k][agents[k][0]])
		fmt.Fprintf(out, "\nreal containers, %d pods, %s", k.pods, variantTitle(k.variant))
		if rounds > 1 {
			fmt.Fprintf(out, " (medians of %d rounds, min–max in brackets)", rounds)
		}
		fmt.Fprint(out, ":\n\n")
		printRatioTable(out, agents[k], groups[k], realRows)
	}
	if len(rep.Idle) > 0 {
		order, idle := idleGroups(rep.Idle)
		fmt.Fprintf(out, "\nreal containers, idle: %d pods running, %.1f minutes:\n\n", rep.Idle[0].Pods, rep.Idle[0].Minutes)
		printRatioTable(out, order, idle, idleRows)
	}
}

func variantTitle(v string) string {
	if v == variantProbe {
		return "busybox with an exec readiness probe and a configMap volume"
	}
	return "busybox sleeping"
}

// printRealCase prints one case's headline figures and its processes'
// shares.
func printRealCase(out io.Writer, r *realCaseResult) {
	fmt.Fprintf(out, "%s: all Ready in %.2fs (p99 %.0f ms), all gone in %.2fs, sandboxes stopped %s s, removed %s s; agent CPU %.2fs (containerd %.2fs, shims %.2fs), peak PSS %.0f MiB; CPU by process (s):",
		r.Agent, r.AllReadySec, r.P99Ms, r.AllGoneSec, figure(r.SandboxesStoppedSec), figure(r.SandboxesRemovedSec),
		r.AgentCPUSec, r.ContainerdCPUSec, r.ShimsCPUSec, float64(r.PeakPSSBytes)/(1<<20))
	for _, p := range slices.Sorted(maps.Keys(r.AgentCPUEach)) {
		fmt.Fprintf(out, " %s %.2f", p, r.AgentCPUEach[p])
	}
	fmt.Fprintf(out, "; API writes per pod: %s\n", byResource(r.WritesPerPodEach))
}

// printRealIdle prints one idle case's figures.
func printRealIdle(out io.Writer, r *realIdleResult) {
	fmt.Fprintf(out, "%s idle: agent CPU %.2f s/min, containerd and shims %.2f s/min, API writes per minute %.1f: %s\n",
		r.Agent, r.AgentCPUPerMin, r.RuntimeCPUPerMin, r.WritesPerMin, byResource(r.WritesPerMinEach))
}

// byResource lists counts by verb and resource, the largest first.
func byResource(m map[string]float64) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.2f", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// readRealReports reads the real-container part of bench JSON reports
// (several runs, one agent or pod count each) into one.
func readRealReports(paths []string) (*realReport, error) {
	all := &realReport{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var doc struct {
			Real *realReport `json:"real"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if doc.Real == nil {
			return nil, fmt.Errorf("%s: no real-container figures", p)
		}
		all.Cases = append(all.Cases, doc.Real.Cases...)
		all.Idle = append(all.Idle, doc.Real.Idle...)
	}
	return all, nil
}

// realRatio is one agent's figure over the kubelet's, with its target (0:
// none), as the JSON report keeps it.
type realRatio struct {
	Case   string  `json:"case"` // "<variant> <pods>" or "idle"
	Agent  string  `json:"agent"`
	Figure string  `json:"figure"`
	Ratio  float64 `json:"ratio"`
	Target float64 `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
}

// ratiosOf lists every agent's ratios to the kubelet for rows (of the
// medians over the rounds).
func ratiosOf[T any](name string, byAgent map[string][]T, rows []ratioRow[T]) []realRatio {
	peerRes, ok := byAgent[ratioPeer]
	if !ok {
		return nil
	}
	var out []realRatio
	for _, a := range slices.Sorted(maps.Keys(byAgent)) {
		if a == ratioPeer {
			continue
		}
		for _, row := range rows {
			med, _, _ := spread(byAgent[a], row.get)
			peer, _, _ := spread(peerRes, row.get)
			r, ok := ratio(med, peer)
			if !ok {
				continue
			}
			x := realRatio{Case: name, Agent: a, Figure: row.name, Ratio: r}
			if t, has := row.target[a]; has {
				met := r <= t
				x.Target, x.Met = t, &met
			}
			out = append(out, x)
		}
	}
	return out
}

// realRatios are the ratios of every case and of the idle case.
func realRatios(rep *realReport) []realRatio {
	keys, groups, _ := caseGroups(rep.Cases)
	var out []realRatio
	for _, k := range keys {
		out = append(out, ratiosOf(fmt.Sprintf("%s %d", k.variant, k.pods), groups[k], realRows)...)
	}
	_, idle := idleGroups(rep.Idle)
	return append(out, ratiosOf("idle", idle, idleRows)...)
}
