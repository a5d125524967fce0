// Command faults is `make faults`: the fault suite. Real etcd and
// kube-apiserver, a real nats-server and the five stages as separate
// processes; for each case a fresh node, a burst of pods, and a fault when
// about half of them are Ready: SIGKILL of a stage (started again after
// 5 s), of one of three pod worker replicas (not started again), of
// nats-server (10 s down), of one server of a three-server NATS cluster
// (not started again), of kube-apiserver (20 s down), of the pod
// workers on the process and CRI runtimes, and malformed messages on the
// bus. Each case records pods
// lost, containers restarted (container ID or restart count changed) and
// how many of those restarts the API did not show (hidden), terminal
// statuses rewritten, processes leaked, Node NotReady time, convergence
// after the restart, and stage crashes. It prints one table and writes
// JSON under bench/out/.
//
//	go run ./bench/faults                        # every case, 2000 pods (200 on CRI, 20 on process)
//	go run ./bench/faults -short                 # what make test runs
//	go run ./bench/faults -cases kill-podworkers,nats-down -pods 500
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/splitlet/splitlet/libs/runtime/cri"
	"github.com/splitlet/splitlet/libs/testenv"
)

// cases of the full suite, for n sim pods.
func cases(n int) []faultCase {
	sim := func(name, kill string, outage time.Duration) faultCase {
		return faultCase{Name: name, Runtime: "sim", Replicas: 1, Pods: n, Done: 10, Kill: kill, Outage: outage}
	}
	out := []faultCase{sim("baseline", "", 0)}
	for _, stage := range []string{"podconfig", "prober", "nodehb", "statussync", "podworkers"} {
		kill := stage
		if stage == "podworkers" {
			kill = "podworkers-0"
		}
		out = append(out, sim("kill-"+stage, kill, 5*time.Second))
	}
	one := sim("kill-one-of-3-podworkers", "podworkers-1", 0)
	one.Replicas = 3
	// one server of a three-server NATS cluster lost for good.
	cluster := sim("nats-cluster-server-lost", "nats-server-1", 0)
	cluster.NATSServers = 3
	out = append(out, one, sim("nats-down", "nats-server", 10*time.Second), cluster, sim("apiserver-down", apiServer, 20*time.Second))
	poison := sim("poison", "", 0)
	poison.Poison = true
	out = append(out, poison,
		faultCase{Name: "process-kill-podworkers", Runtime: "process", Replicas: 1, Pods: 20, Done: 1, Kill: "podworkers-0", Outage: 5 * time.Second},
		faultCase{Name: "cri-kill-podworkers", Runtime: "cri", Replicas: 1, Pods: min(n, 200), Done: 2, Kill: "podworkers-0", Outage: 5 * time.Second})
	return out
}

// shortCases are what make test runs: fewer pods, the pod worker and NATS
// cases on every runtime.
func shortCases() []faultCase {
	return []faultCase{
		{Name: "kill-podworkers", Runtime: "sim", Replicas: 1, Pods: 200, Done: 5, Kill: "podworkers-0", Outage: 2 * time.Second},
		{Name: "kill-one-of-3-podworkers", Runtime: "sim", Replicas: 3, Pods: 200, Done: 5, Kill: "podworkers-1"},
		{Name: "nats-down", Runtime: "sim", Replicas: 1, Pods: 200, Done: 5, Kill: "nats-server", Outage: 5 * time.Second},
		{Name: "process-kill-podworkers", Runtime: "process", Replicas: 1, Pods: 10, Done: 1, Kill: "podworkers-0", Outage: 2 * time.Second},
		{Name: "cri-kill-podworkers", Runtime: "cri", Replicas: 1, Pods: 20, Done: 1, Kill: "podworkers-0", Outage: 2 * time.Second},
	}
}

func main() {
	pods := flag.Int("pods", 2000, "sim pods per case")
	only := flag.String("cases", "", "comma-separated case names (default: all)")
	short := flag.Bool("short", false, "the short suite of make test")
	outDir := flag.String("out", "bench/out", "where the JSON goes")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	list := cases(*pods)
	if *short {
		list = shortCases()
	}
	if *only != "" {
		var picked []faultCase
		for _, name := range strings.Split(*only, ",") {
			found := false
			for _, c := range list {
				if c.Name == name {
					picked, found = append(picked, c), true
				}
			}
			if !found {
				fmt.Fprintf(os.Stderr, "faults: no case %q\n", name)
				os.Exit(2)
			}
		}
		list = picked
	}
	results, failed, err := runSuite(ctx, os.Stdout, list, *outDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	_ = results
	if failed {
		os.Exit(1)
	}
}

// runSuite runs the cases on one control plane, prints the table, writes
// the JSON; failed says whether a case missed its targets.
func runSuite(ctx context.Context, out io.Writer, list []faultCase, outDir string) ([]*faultResult, bool, error) {
	binDir, err := testenv.BinDir()
	if err != nil {
		return nil, false, err
	}
	work, err := os.MkdirTemp("", "splitlet-faults-")
	if err != nil {
		return nil, false, err
	}
	// A pod worker on containerd leaves its root directory mounted (a
	// shared bind mount, as the kubelet's): undone before the removal.
	defer func() {
		_ = testenv.UnmountUnder(work)
		_ = os.RemoveAll(work)
	}()
	cp, err := testenv.StartControlPlane(ctx, testenv.ControlPlaneOptions{})
	if err != nil {
		return nil, false, err
	}
	defer cp.Stop()
	env := &faultEnv{cp: cp, cs: cp.Clientset(), kubeconfig: cp.Kubeconfig, caFile: cp.CAFile, binDir: binDir, work: work}
	for _, c := range list {
		if c.Runtime == "cri" {
			cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{})
			if err != nil {
				return nil, false, fmt.Errorf("the CRI cases need a containerd: %w", err)
			}
			defer cd.Stop()
			defer func() {
				cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, node := range env.criNodes {
					_ = testenv.RemoveSandboxes(cctx, cd.Endpoint, testenv.PodLogRoot, map[string]string{cri.NodeLabel: node})
				}
			}()
			env.criEndpoint = cd.Endpoint
			break
		}
	}
	var results []*faultResult
	failed := false
	for _, c := range list {
		fmt.Fprintf(out, "%s: %d pods on %s ...\n", c.Name, c.Pods+c.Done, c.Runtime)
		res, err := runFaultCase(ctx, env, c, func(f string, a ...any) { fmt.Fprintf(out, "  "+f+"\n", a...) })
		if err != nil {
			// the case could not run to its end: a miss, and the next goes on.
			res = &faultResult{Case: c.Name, Pods: c.Pods + c.Done}
			res.Notes = append(res.Notes, fmt.Sprintf("MISSED: the case did not run to its end: %v", err))
			failed = true
		} else if f := res.failures(c); len(f) > 0 {
			failed = true
			res.Notes = append(res.Notes, "MISSED: "+strings.Join(f, "; "))
		}
		printResults(out, []*faultResult{res})
		results = append(results, res)
	}
	printResults(out, results)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return results, failed, err
	}
	path := filepath.Join(outDir, fmt.Sprintf("faults-%s.json", time.Now().UTC().Format("20060102-150405")))
	data, _ := json.MarshalIndent(map[string]any{"at": time.Now().UTC(), "cases": results}, "", "  ")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return results, failed, err
	}
	fmt.Fprintf(out, "\nraw figures: %s\n", path)
	return results, failed, nil
}

func printResults(out io.Writer, results []*faultResult) {
	fmt.Fprintln(out, "\n| case | pods settled | lost | restarted (hidden) | terminal rewritten | leaked | Node NotReady s | converge s | crashes | notes |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Fprintf(out, "| %s | %d/%d | %d | %d (%d) | %d | %d | %.1f | %.1f | %v | %s |\n", r.Case, r.Ready, r.Pods, r.Lost,
			r.Restarted, r.Hidden, r.Rewritten, r.Leaked, r.NotReadySec, r.ConvergeSec, crashesText(r.Crashes), strings.Join(r.Notes, "; "))
	}
}

func crashesText(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	return fmt.Sprint(m)
}
