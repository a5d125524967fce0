// Command bench is `make bench`: Splitlet side by side with kwok and with an
// ideal agent, one after another on one real control plane, in one run.
//
// For each agent, N pods bound to its node are created at a fixed
// concurrency and a watch measures: time until all are Running and Ready;
// create → Ready latency percentiles; time until all are gone after one
// DeleteCollection; API writes per pod (apiserver_request_total); peak RSS
// of the agent's processes. It prints a Markdown table of ratios and writes
// the raw figures as JSON under bench/out/.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
)

func main() {
	var (
		pods        = flag.Int("pods", 5000, "pods per agent (0: skip the main case)")
		concurrency = flag.Int("concurrency", 20, "concurrent pod creations")
		which       = flag.String("agents", "split,split-shadow,allinone,kwok,kwok-v0.7.0,ideal", "agents to run, in order (split-shadow: split with a shadow prober; also: split-trace1, split-trace100: split with tracing at 1 % and 100 %)")
		outDir      = flag.String("out", "bench/out", "where the JSON figures go")
		backlog     = flag.Int("backlog-pods", 5000, "pods of the backlog case: created before each agent starts, drained from its start (0: skip it)")
		scalePods   = flag.Int("scale-pods", 2000, "pods of the scaling case (0: skip it)")
		largePods   = flag.Int("large-pods", 20000, "pods of the large-node case: split alone, once, its CPU, PSS and RSS per pod against the main case's (0: skip it)")
		stages      = flag.Bool("stages", true, "also run the stage cases (each stage's own benchmark)")
		profiles    = flag.Bool("profiles", false, "save the Splitlet processes' CPU profiles (from the first create, and from the DeleteCollection: <agent>-delete-<process>) and heap profiles (when all pods are Ready) under -out")
		pinCPUs     = flag.Bool("pin", runtime.NumCPU() >= 2, "run each agent on the last CPU and the control plane and the bench's client on the others (taskset), so that agents are measured on equal CPU and apart from the API server")
		rounds      = flag.Int("rounds", 3, "rounds over the agents (alternating their order); each figure is the median")
		cpuProfile  = flag.Duration("cpu-profile", 20*time.Second, "with -profiles: how long each CPU profile runs (the creation's and the deletion's)")
		scaleLat    = flag.Duration("scale-start-latency", 200*time.Millisecond, "sim start latency of the scaling case")
		scaleConc   = flag.Int("scale-max-concurrent-starts", 20, "per-replica concurrent starts of the scaling case")
		baseBin     = flag.String("base-bin", "", "a directory of another build's stage binaries and splitlet, which the agents split-base and allinone-base run as split and allinone run this build's")
		ideal       = flag.Bool("ideal-agent", false, "run as the ideal agent (internal)")
		node        = flag.String("node", "", "ideal agent: node name")
		kubeconfig  = flag.String("kubeconfig", "", "ideal agent: kubeconfig")
	)
	realFlags := addRealFlags()
	flag.Parse()
	if *ideal {
		if err := runIdealAgent(*node, *kubeconfig); err != nil {
			fmt.Fprintln(os.Stderr, "ideal agent:", err)
			os.Exit(1)
		}
		return
	}
	if realFlags.report != "" {
		if err := printRealReports(os.Stdout, realFlags.report); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	realOpts, err := realFlags.options()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := benchOptions{real: realOpts, baseBin: *baseBin, which: *which, pods: *pods, concurrency: *concurrency, outDir: *outDir,
		scale: scaleOptions{startLatency: *scaleLat, maxConcurrent: *scaleConc}, scalePods: *scalePods, largePods: *largePods, backlogPods: *backlog,
		stages: *stages, profiles: *profiles, cpuProfile: *cpuProfile, rounds: max(*rounds, 1), pinCPUs: *pinCPUs}
	if err := run(ctx, os.Stdout, opts); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// benchOptions are the flags of one bench run.
type benchOptions struct {
	baseBin, which, outDir string
	pods, concurrency      int
	scale                  scaleOptions
	scalePods, largePods   int
	backlogPods            int
	stages, profiles       bool
	cpuProfile             time.Duration
	rounds                 int
	pinCPUs                bool
	real                   realOptions
}

func run(ctx context.Context, out io.Writer, o benchOptions) (err error) {
	work, err := os.MkdirTemp("", "splitlet-bench-")
	if err != nil {
		return err
	}
	// A failed run keeps its directory: its errors name the agents' logs
	// in it.
	defer func() {
		if err != nil {
			fmt.Fprintf(out, "bench failed; its directory is kept for the logs: %s\n", work)
			return
		}
		_ = os.RemoveAll(work)
	}()
	env, err := newBenchEnv(out, o, work)
	if err != nil {
		return err
	}
	order, err := agentOrder(o.which)
	if err != nil {
		return err
	}
	if err := o.real.check(); err != nil {
		return err
	}
	report := map[string]any{"pods": o.pods, "concurrency": o.concurrency, "rounds": o.rounds, "at": time.Now().UTC()}
	var results map[string]*result
	if o.pods > 0 {
		var rounds map[string][]*result
		if results, rounds, err = runRounds(ctx, out, env, o, order); err != nil {
			return err
		}
		report["results"], report["byRound"] = results, rounds
		fmt.Fprintln(out)
		printTable(out, order, results, rounds)
		printBreakdown(out, order, results)
	}
	if o.backlogPods > 0 {
		if report["backlog"], err = runBacklog(ctx, out, env, o, order); err != nil {
			return err
		}
	}
	if o.largePods > 0 && results != nil {
		if report["large"], err = runLarge(ctx, out, env, o, results["split"]); err != nil {
			return err
		}
	}
	if o.scalePods > 0 {
		if report["scaling"], err = runScaling(ctx, out, env, o); err != nil {
			return err
		}
	}
	if o.real.enabled() {
		realRes, err := runReal(ctx, out, env, o.real)
		report["real"] = realRes
		if err != nil {
			_ = writeReport(out, o.outDir, report)
			return err
		}
	}
	if o.stages {
		stageRes, err := runStageCases(ctx, out, repoRoot(env.binDir))
		report["stages"] = stageRes
		if err != nil {
			return err
		}
	}
	return writeReport(out, o.outDir, report)
}

// newBenchEnv sets up what every case shares, pinning the bench itself
// (and the control plane it starts) apart from the agents when asked.
func newBenchEnv(out io.Writer, o benchOptions, work string) (*benchEnv, error) {
	binDir, err := testenv.BinDir()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	env := &benchEnv{binDir: binDir, baseBinDir: o.baseBin, workDir: work, self: self}
	if o.profiles {
		env.profileDir, env.cpuProfile = o.outDir, o.cpuProfile
	}
	if o.pinCPUs {
		n := runtime.NumCPU()
		env.agentCPUs = strconv.Itoa(n - 1)
		env.controlPlaneCPUs = fmt.Sprintf("0-%d", max(n-2, 0))
		if err := pin(env.controlPlaneCPUs, os.Getpid()); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "agents on CPU %s, control plane and bench client on CPUs %s\n", env.agentCPUs, env.controlPlaneCPUs)
	}
	return env, nil
}

// agentOrder parses the comma-separated agent names.
func agentOrder(which string) ([]string, error) {
	var order []string
	for _, name := range strings.Split(which, ",") {
		if _, ok := findAgent(name); !ok {
			return nil, fmt.Errorf("unknown agent %q", name)
		}
		order = append(order, name)
	}
	return order, nil
}

// runRounds runs the main case for each agent, round after round (inRounds).
func runRounds(ctx context.Context, out io.Writer, env *benchEnv, o benchOptions, order []string) (map[string]*result, map[string][]*result, error) {
	return inRounds(ctx, out, env, o, order, "", "bench-", o.pods, measureCase)
}

// runBacklog runs the backlog case for each agent, in rounds as the main
// case: the pods exist before the agent starts, and its drain rate (pods
// Ready a second from its start) is the figure.
func runBacklog(ctx context.Context, out io.Writer, env *benchEnv, o benchOptions, order []string) (map[string][]*result, error) {
	results, rounds, err := inRounds(ctx, out, env, o, order, "backlog case", "backlog-", o.backlogPods, measureBacklog)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\nbacklog case: %d pods created before the agent starts, figures from its start\n\n", o.backlogPods)
	printRows(out, backlogRows, order, results, rounds)
	return rounds, nil
}

// inRounds runs one case (measure, n pods, nodes named prefix+agent) for
// each agent, round after round. Rounds alternate the order of the agents,
// so that neither end of a run (a machine warming up, a page cache
// filling) favours one agent; each figure is the median over the rounds.
// The main case (label "") prints each agent's figures as it goes.
func inRounds(ctx context.Context, out io.Writer, env *benchEnv, o benchOptions, order []string, label, prefix string, n int, measure measureFunc) (map[string]*result, map[string][]*result, error) {
	rounds := map[string][]*result{}
	for round := range o.rounds {
		for _, name := range roundOrder(order, round) {
			a, _ := findAgent(name)
			what := name
			if label != "" {
				what = label + ": " + name
			}
			fmt.Fprintf(out, "%s: %d pods (round %d of %d) ...\n", what, n, round+1, o.rounds)
			res, err := runCaseWith(ctx, env, a, prefix+name, n, o.concurrency, measure)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", what, err)
			}
			if label == "" {
				printCase(out, name, res)
			}
			rounds[name] = append(rounds[name], res)
		}
	}
	results := map[string]*result{}
	for name, rs := range rounds {
		results[name] = median(rs)
	}
	return results, rounds, nil
}

// runLarge is the one-node-many-pods case: split with its defaults, on the
// same pinned CPU as the main case, once (it takes minutes).
func runLarge(ctx context.Context, out io.Writer, env *benchEnv, o benchOptions, split *result) (*result, error) {
	a, _ := findAgent("split")
	fmt.Fprintf(out, "large-node case: split, %d pods ...\n", o.largePods)
	res, err := runCase(ctx, env, a, "bench-split-large", o.largePods, o.concurrency)
	if err != nil {
		return nil, fmt.Errorf("large-node case: %w", err)
	}
	printCase(out, "split-large", res)
	printLarge(out, split, res)
	return res, nil
}

// runScaling compares one pod worker replica with three. It is about
// replicas, not one CPU: it gets the whole machine.
func runScaling(ctx context.Context, out io.Writer, env *benchEnv, o benchOptions) (map[string]*result, error) {
	if env.agentCPUs != "" {
		env.agentCPUs, env.controlPlaneCPUs = "", ""
		if err := pin(fmt.Sprintf("0-%d", runtime.NumCPU()-1), os.Getpid()); err != nil {
			return nil, err
		}
	}
	scaleRes := map[string]*result{}
	for _, replicas := range []int{1, 3} {
		env.scale = o.scale
		env.scale.replicas = replicas
		name := fmt.Sprintf("split-%dpw", replicas)
		fmt.Fprintf(out, "scaling case: %s, %d pods ...\n", name, o.scalePods)
		a, _ := findAgent("split")
		res, err := runCase(ctx, env, a, "bench-"+name, o.scalePods, o.concurrency)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		scaleRes[name] = res
	}
	one, three := scaleRes["split-1pw"], scaleRes["split-3pw"]
	fmt.Fprintf(out, "\n| scaling case (%d pods, start latency %v, %d concurrent starts per replica) | 1 replica | 3 replicas | 3/1 |\n|---|---|---|---|\n",
		o.scalePods, o.scale.startLatency, o.scale.maxConcurrent)
	fmt.Fprintf(out, "| throughput (pods/s) | %.1f | %.1f | %.2f |\n", one.ThroughputPPS, three.ThroughputPPS, three.ThroughputPPS/one.ThroughputPPS)
	return scaleRes, nil
}

// writeReport writes the run's raw figures as JSON under outDir.
func writeReport(out io.Writer, outDir string, report map[string]any) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(outDir, fmt.Sprintf("bench-%s.json", time.Now().UTC().Format("20060102-150405")))
	data, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nraw figures: %s\n", path)
	return nil
}

// roundOrder is the agents' order in a round: as given, reversed every
// other round, so that neither end of a run favours one agent.
func roundOrder(order []string, round int) []string {
	seq := slices.Clone(order)
	if round%2 == 1 {
		slices.Reverse(seq)
	}
	return seq
}

// figureRange is a median figure, with the rounds' min–max after it when
// there were several.
func figureRange(median float64, rounds []*result, get func(*result) float64) string {
	if len(rounds) < 2 {
		return fmt.Sprintf("%.2f", median)
	}
	lo, hi := get(rounds[0]), get(rounds[0])
	for _, r := range rounds[1:] {
		lo, hi = min(lo, get(r)), max(hi, get(r))
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", median, lo, hi)
}

// printLarge compares the large-node case with the main case's split: the
// cost per pod should not grow with the node (the target: at most 1.2 ×).
func printLarge(out io.Writer, base, large *result) {
	fmt.Fprintf(out, "\n| large-node case | split, %d pods |", large.Pods)
	if base != nil {
		fmt.Fprintf(out, " split, %d pods | per pod, large/main |", base.Pods)
	}
	fmt.Fprint(out, "\n|---|---|")
	if base != nil {
		fmt.Fprint(out, "---|---|")
	}
	fmt.Fprintln(out)
	row := func(name string, l, b float64, perPod bool) {
		fmt.Fprintf(out, "| %s | %.1f |", name, l)
		if base != nil {
			fmt.Fprintf(out, " %.1f |", b)
			if perPod && b > 0 {
				fmt.Fprintf(out, " %.2f |", (l/float64(large.Pods))/(b/float64(base.Pods)))
			} else {
				fmt.Fprint(out, " |")
			}
		}
		fmt.Fprintln(out)
	}
	var b result
	if base != nil {
		b = *base
	}
	row("time to all Running+Ready (s)", large.AllReadySec, b.AllReadySec, true)
	row("all gone after DeleteCollection (s)", large.AllGoneSec, b.AllGoneSec, true)
	row("agent CPU, create → all gone (s)", large.CPUSec, b.CPUSec, true)
	row("peak PSS, summed, sampled (MiB)", float64(large.PeakPSSBytes)/(1<<20), float64(b.PeakPSSBytes)/(1<<20), true)
	row("peak RSS, summed (MiB)", float64(large.PeakRSSBytes)/(1<<20), float64(b.PeakRSSBytes)/(1<<20), true)
	row("create→Ready p99 (ms)", large.P99Ms, b.P99Ms, false)
}

// printCase prints one case's headline figures and its processes' shares.
func printCase(out io.Writer, name string, res *result) {
	fmt.Fprintf(out, "%s: all Ready in %.2fs, all gone in %.2fs, CPU %.1fs (control plane %.1fs), peak RSS by process (MiB):",
		name, res.AllReadySec, res.AllGoneSec, res.CPUSec, res.ControlPlaneCPUSec)
	for _, p := range slices.Sorted(maps.Keys(res.PeakRSSEach)) {
		fmt.Fprintf(out, " %s %.0f", p, float64(res.PeakRSSEach[p])/(1<<20))
	}
	fmt.Fprint(out, "; of it, executables' pages (MiB):")
	for _, p := range slices.Sorted(maps.Keys(res.FileRSSEach)) {
		fmt.Fprintf(out, " %s %.0f", p, float64(res.FileRSSEach[p])/(1<<20))
	}
	fmt.Fprint(out, "; CPU by process (s):")
	for _, p := range slices.Sorted(maps.Keys(res.CPUEach)) {
		fmt.Fprintf(out, " %s %.1f", p, res.CPUEach[p])
	}
	if res.EvictionStageCPUSec > 0 {
		fmt.Fprintf(out, "; eviction loop: %.0f rounds, CPU %.1f ms of its stage's %.0f ms (%.2f %%)",
			res.EvictionRounds, 1000*res.EvictionCPUSec, 1000*res.EvictionStageCPUSec, res.evictionShare())
	}
	fmt.Fprintln(out)
}

func findAgent(name string) (agent, bool) {
	for _, a := range agents {
		if a.name == name {
			return a, true
		}
	}
	return agent{}, false
}

// printTable prints every figure per agent and the ratios of the first
// agent (Splitlet split) to kwok and to the ideal agent.
// tableRow is one figure of a table: its name and how to read it.
type tableRow struct {
	name string
	get  func(*result) float64
}

// burstRows are the main case's figures.
var burstRows = []tableRow{
	{"time to all Running+Ready (s)", func(x *result) float64 { return x.AllReadySec }},
	{"create→Ready p50 (ms)", func(x *result) float64 { return x.P50Ms }},
	{"create→Ready p90 (ms)", func(x *result) float64 { return x.P90Ms }},
	{"create→Ready p99 (ms)", func(x *result) float64 { return x.P99Ms }},
	{"create→Ready max (ms)", func(x *result) float64 { return x.MaxMs }},
	{"time to all gone after DeleteCollection (s)", func(x *result) float64 { return x.AllGoneSec }},
	{"API writes per pod, pods (create→Ready)", func(x *result) float64 { return x.PodWritesPer }},
	{"API writes per pod, all resources", func(x *result) float64 { return x.AllWritesPer }},
	{"peak PSS, summed, sampled (MiB)", func(x *result) float64 { return float64(x.PeakPSSBytes) / (1 << 20) }},
	{"peak RSS, summed, sampled (MiB)", func(x *result) float64 { return float64(x.SampledRSSBytes) / (1 << 20) }},
	{"peak RSS, summed, each process's high-water mark (MiB)", func(x *result) float64 { return float64(x.PeakRSSBytes) / (1 << 20) }},
	{"of it, executables' pages (MiB)", func(x *result) float64 { return float64(x.FileRSSBytes) / (1 << 20) }},
	{"peak RSS less executables' pages (MiB)", func(x *result) float64 { return float64(x.PeakRSSBytes-x.FileRSSBytes) / (1 << 20) }},
	{"agent CPU, first create → all gone (s)", func(x *result) float64 { return x.CPUSec }},
	{"of which shadow stages' CPU (s)", func(x *result) float64 { return x.shadowCPU() }},
	{"agent CPU, whole life with start-up (s)", func(x *result) float64 { return x.CPULifeSec }},
	{"control plane CPU, agent's life (s)", func(x *result) float64 { return x.ControlPlaneCPUSec }},
	{"eviction loop CPU, first create → all gone (ms)", func(x *result) float64 { return 1000 * x.EvictionCPUSec }},
	{"eviction loop CPU, share of its stage's (nodehb) CPU (%)", func(x *result) float64 { return x.evictionShare() }},
	{"bus messages delivered per pod (split)", func(x *result) float64 { return x.BusMsgsPerPod }},
	{"bus KiB delivered per pod (split)", func(x *result) float64 { return x.BusKiBPerPod }},
	{"bus messages delivered per pod, create→Ready (split)", func(x *result) float64 { return x.BusMsgsPerPodToReady }},
	{"bus KiB delivered per pod, create→Ready (split)", func(x *result) float64 { return x.BusKiBPerPodToReady }},
}

// backlogRows are the backlog case's figures.
var backlogRows = []tableRow{
	{"drain rate, agent start → all Ready (pods/s)", func(x *result) float64 { return x.ThroughputPPS }},
	{"time from agent start to all Running+Ready (s)", func(x *result) float64 { return x.AllReadySec }},
	{"agent start → Ready p50 (ms)", func(x *result) float64 { return x.P50Ms }},
	{"agent start → Ready p99 (ms)", func(x *result) float64 { return x.P99Ms }},
	{"time to all gone after DeleteCollection (s)", func(x *result) float64 { return x.AllGoneSec }},
	{"peak PSS, summed, sampled (MiB)", func(x *result) float64 { return float64(x.PeakPSSBytes) / (1 << 20) }},
	{"agent CPU, start → all gone (s)", func(x *result) float64 { return x.CPUSec }},
}

// shadowCPU is the CPU time of the run's shadow stages (split-shadow's
// shadow prober), part of CPUSec.
func (x *result) shadowCPU() float64 {
	var sum float64
	for name, sec := range x.CPUEach {
		if strings.HasPrefix(name, shadowProc) {
			sum += sec
		}
	}
	return sum
}

func printTable(out io.Writer, order []string, r map[string]*result, rounds map[string][]*result) {
	printRows(out, burstRows, order, r, rounds)
}

// printRows prints a table of rows, an agent a column, with each agent's
// figure over kwok's and the ideal agent's after them.
func printRows(out io.Writer, rows []tableRow, order []string, r map[string]*result, rounds map[string][]*result) {
	head := "| figure |"
	sep := "|---|"
	for _, name := range order {
		head += " " + name + " |"
		sep += "---|"
	}
	base := order[0]
	var peers []string
	for _, p := range []string{"kwok", "ideal"} {
		if _, ok := r[p]; ok && p != base {
			peers = append(peers, p)
			head += fmt.Sprintf(" %s/%s |", base, p)
			sep += "---|"
		}
	}
	fmt.Fprintln(out, head)
	fmt.Fprintln(out, sep)
	for _, row := range rows {
		line := "| " + row.name + " |"
		for _, name := range order {
			line += " " + figureRange(row.get(r[name]), rounds[name], row.get) + " |"
		}
		for _, p := range peers {
			d := row.get(r[p])
			if d == 0 {
				line += " – |"
				continue
			}
			line += fmt.Sprintf(" %.2f |", row.get(r[base])/d)
		}
		fmt.Fprintln(out, line)
	}
}
