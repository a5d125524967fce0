package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// stageCase is one stage's own benchmark, run with `go test -bench` and read
// back from its reported metrics.
type stageCase struct {
	stage, pkg, bench string
	// metrics to print: unit as the benchmark reports it, and its meaning.
	metrics [][2]string
	env     []string
}

var stageCases = []stageCase{
	{"podconfig", "./services/podconfig/internal/controller", "BenchmarkPublish5000$",
		[][2]string{{"pods/s", "publish rate through the merge (pods/s)"}}, nil},
	{"podconfig", "./services/podconfig/internal/controller", "BenchmarkRawJetStream5000$",
		[][2]string{{"pods/s", "peer: bare JetStream publish of the same pods (pods/s)"}}, nil},
	{"podconfig", "./services/podconfig/internal/service", "BenchmarkAPI5000Pods$",
		[][2]string{{"ms-last-create-to-last-ADD", "last create → last ADD on the bus (ms)"}, {"PodUpdate-msgs/s", "PodUpdate messages/s"}}, nil},
	{"podworkers", "./services/podworkers/internal/controller", "BenchmarkPodsThroughWorkers$",
		[][2]string{{"pods/s", "5000 pods through the workers, sim (pods/s)"}, {"bytes/pod", "memory per pod (heap bytes)"}}, nil},
	{"prober", "./services/prober/internal/workers", "BenchmarkProbeRate/tcp$",
		[][2]string{{"probes/s", "5000 pods × 2 tcp probes, period 1 s (probes/s)"}, {"drift-%", "rate drift (%, target < 10)"}, {"cpu-cores", "CPU (cores)"}, {"heap-MiB", "heap (MiB)"}}, nil},
	{"statussync", "./services/statussync/internal/service", "BenchmarkCreateToReady$",
		[][2]string{{"writes/pod", "API writes per pod, create → Ready (target ≤ 2)"}}, nil},
	{"statussync", "./services/statussync/internal/service", "BenchmarkSteadyStatePatches$",
		[][2]string{{"patches/s", "patches/s at steady state"}, {"changes/patch", "changes folded into one patch"}}, nil},
}

// runStageCases runs each stage case once and prints a second table.
func runStageCases(ctx context.Context, out io.Writer, root string) (map[string]map[string]float64, error) {
	results := map[string]map[string]float64{}
	fmt.Fprintln(out, "\n| stage | figure | value |\n|---|---|---|")
	for _, c := range stageCases {
		cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^"+c.bench, "-benchtime", "1x", "-count", "1", c.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), c.env...)
		raw, err := cmd.CombinedOutput()
		if err != nil {
			return results, fmt.Errorf("%s %s: %v\n%s", c.pkg, c.bench, err, raw)
		}
		metrics := parseBench(string(raw))
		key := c.stage + "/" + strings.TrimSuffix(c.bench, "$")
		results[key] = metrics
		for _, m := range c.metrics {
			v, ok := metrics[m[0]]
			if !ok {
				return results, fmt.Errorf("%s: no %q in its output:\n%s", key, m[0], raw)
			}
			fmt.Fprintf(out, "| %s | %s | %s |\n", c.stage, m[1], strconv.FormatFloat(v, 'f', 2, 64))
		}
	}
	if pub, raw := results["podconfig/BenchmarkPublish5000"]["pods/s"], results["podconfig/BenchmarkRawJetStream5000"]["pods/s"]; raw > 0 {
		fmt.Fprintf(out, "| podconfig | publish rate / bare JetStream (ratio) | %.2f |\n", pub/raw)
	}
	return results, nil
}

// parseBench reads "value unit" pairs from the result lines of go test -bench.
func parseBench(out string) map[string]float64 {
	m := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				m[f[i+1]] = v
			}
		}
	}
	return m
}

func repoRoot(binDir string) string { return filepath.Dir(binDir) }
