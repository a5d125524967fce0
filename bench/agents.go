package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/libs/tracing/tracingtest"
)

// agent is one contender: it runs a node agent for the named node.
type agent struct {
	name  string
	start func(ctx context.Context, env *benchEnv, node string) (*agentRun, error)
	// registersNode: the agent creates its own Node (else the bench does).
	registersNode bool
}

// agentRun is a running agent: its processes, stopped by stop.
type agentRun struct {
	procs []*exec.Cmd
	names []string
	dir   string
	// health is the health/pprof address of each Splitlet process.
	health map[string]string
	// natsMonitor is the nats-server's monitoring address, natsURL its
	// client URL (split runs).
	natsMonitor, natsURL string
	// cleanups run after the processes stopped (a trace collector).
	cleanups []func()
	// cpuAtCreate is each process's CPU time when the first pod was
	// created; mem samples their memory from then on.
	cpuAtCreate []float64
	mem         *memSampler
	// evictionAtCreate is the eviction manager's cost when the first pod
	// was created.
	evictionAtCreate evictionCost
}

// busTraffic is what the nats-server counted: messages and bytes in (published)
// and out (delivered to subscribers).
type busTraffic struct {
	InMsgs   int64 `json:"in_msgs"`
	OutMsgs  int64 `json:"out_msgs"`
	InBytes  int64 `json:"in_bytes"`
	OutBytes int64 `json:"out_bytes"`
	// Streams: messages stored by each JetStream stream.
	Streams map[string]uint64 `json:"-"`
}

// busTraffic reads the nats-server's /varz; zero when the run has none.
func (r *agentRun) busTraffic() (busTraffic, error) {
	var t busTraffic
	if r.natsMonitor == "" {
		return t, nil
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + r.natsMonitor + "/varz")
	if err != nil {
		return t, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
		return t, err
	}
	resp, err = (&http.Client{Timeout: 10 * time.Second}).Get("http://" + r.natsMonitor + "/jsz?streams=true")
	if err != nil {
		return t, err
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name  string `json:"name"`
				State struct {
					LastSeq uint64 `json:"last_seq"`
				} `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return t, err
	}
	t.Streams = map[string]uint64{}
	for _, a := range jsz.Accounts {
		for _, st := range a.Streams {
			t.Streams[st.Name] += st.State.LastSeq
		}
	}
	return t, nil
}

// saveProfile writes each Splitlet process's profile of the kind (heap,
// or profile?seconds=N for CPU) to dir, for `go tool pprof`.
func (r *agentRun) saveProfile(dir, prefix, kind string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	var wg sync.WaitGroup
	errs := make(chan error, len(r.health))
	for proc, addr := range r.health {
		wg.Go(func() {
			resp, err := client.Get("http://" + addr + "/debug/pprof/" + kind)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err == nil {
				name, query, _ := strings.Cut(kind, "?")
				ext := ".pb.gz"
				if strings.Contains(query, "debug=") {
					ext = ".txt" // the text form, with the runtime's MemStats
				}
				err = os.WriteFile(filepath.Join(dir, prefix+"-"+proc+"."+name+ext), data, 0o644)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// benchEnv is what every agent runs against.
type benchEnv struct {
	kubeconfig string
	caFile     string
	binDir     string
	// baseBinDir holds another build's binaries (split-base, allinone-base).
	baseBinDir string
	workDir    string
	self       string
	scale      scaleOptions
	// profileDir, when set, receives the profiles of the Splitlet
	// processes: CPU from the first create for cpuProfile, heap when all
	// pods are Ready.
	profileDir string
	cpuProfile time.Duration
	// agentCPUs and controlPlaneCPUs, when set, are taskset CPU lists: the
	// agent's processes run on the first, the control plane and the bench's
	// own client on the second, so that the agents compete with the API
	// server for nothing and each gets the same CPU.
	agentCPUs, controlPlaneCPUs string
}

type scaleOptions struct {
	replicas      int
	startLatency  time.Duration
	maxConcurrent int
}

func (r *agentRun) spawn(env *benchEnv, name, bin string, args ...string) error {
	logPath := filepath.Join(r.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	if env.agentCPUs != "" {
		// taskset before exec: every thread inherits the mask, and the Go
		// runtime sizes GOMAXPROCS from it.
		cmd = exec.Command("taskset", append([]string{"-c", env.agentCPUs, bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); f.Close() }()
	r.procs = append(r.procs, cmd)
	r.names = append(r.names, name)
	return nil
}

// peakRSS sums the peak resident set (VmHWM) of the agent's processes and
// returns each process's share too, and the same for the pages of files
// (RssFile: the executables' code and read-only data, almost all of it)
// resident when it is read. The kernel maps an executable's pages in as they
// are first touched and, with no memory pressure, leaves them mapped, so
// what is resident at the end was there at the peak too: the peak less it
// is what the process allocated (heap, stacks, the runtime's own).
func (r *agentRun) peakRSS() (peak, files memoryFigures, err error) {
	peak, files = memoryFigures{each: map[string]int64{}}, memoryFigures{each: map[string]int64{}}
	for i, p := range r.procs {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Process.Pid))
		if err != nil {
			return peak, files, fmt.Errorf("pid %d: %w", p.Process.Pid, err)
		}
		kib, err := statusKiB(string(data), "VmHWM", "RssFile")
		if err != nil {
			return peak, files, fmt.Errorf("pid %d: %w", p.Process.Pid, err)
		}
		peak.add(r.names[i], kib["VmHWM"]*1024)
		files.add(r.names[i], kib["RssFile"]*1024)
	}
	return peak, files, nil
}

// memoryFigures is a sum over an agent's processes and each one's share.
type memoryFigures struct {
	total int64
	each  map[string]int64
}

func (m *memoryFigures) add(name string, bytes int64) {
	m.total += bytes
	m.each[name] += bytes
}

// statusKiB reads the named kB fields of a /proc/<pid>/status; every one
// must be there.
func statusKiB(status string, keys ...string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, line := range strings.Split(status, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(keys, name) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return nil, fmt.Errorf("%s: unexpected %q", name, rest)
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = v
	}
	for _, k := range keys {
		if _, ok := out[k]; !ok {
			return nil, fmt.Errorf("no %s in the process status", k)
		}
	}
	return out, nil
}

// pids of the agent's processes.
func (r *agentRun) pids() []int {
	out := make([]int, len(r.procs))
	for i, p := range r.procs {
		out[i] = p.Process.Pid
	}
	return out
}

// alive reports an agent process that has exited.
func (r *agentRun) alive() error {
	for _, p := range r.procs {
		if p.ProcessState != nil {
			return fmt.Errorf("%s exited: %v", filepath.Base(p.Path), p.ProcessState)
		}
	}
	return nil
}

func (r *agentRun) stop() {
	for i := len(r.procs) - 1; i >= 0; i-- {
		p := r.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, p := range r.procs {
		for p.ProcessState == nil && time.Now().Before(deadline) {
			if err := p.Process.Signal(syscall.Signal(0)); err != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = p.Process.Kill()
	}
	if r.mem != nil {
		r.mem.stop()
	}
	for _, c := range r.cleanups {
		c()
	}
}

func newRun(env *benchEnv, name string) (*agentRun, error) {
	dir := filepath.Join(env.workDir, name)
	// Each round starts empty: a NATS store or data dir left by an earlier
	// round would be replayed and measured again. A node agent on
	// containerd leaves its root directory mounted (a shared bind mount,
	// as the kubelet's), which is undone when the run stops.
	if err := testenv.UnmountUnder(dir); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &agentRun{dir: dir, health: map[string]string{}}
	r.cleanups = append(r.cleanups, func() { _ = testenv.UnmountUnder(dir) })
	return r, nil
}

func freeAddr() (string, int, error) {
	p, err := testenv.FreePort()
	return fmt.Sprintf("127.0.0.1:%d", p), p, err
}

// splitletArgs are the keys every Splitlet process of a run shares.
func (r *agentRun) splitletArgs(env *benchEnv, node, dataDir, proc string) ([]string, error) {
	addr, _, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r.health[proc] = addr
	args := []string{
		"--kubeconfig=" + env.kubeconfig,
		"--node-name=" + node,
		"--runtime=sim",
		"--data-dir=" + dataDir,
		"--http-addr=" + addr,
	}
	if env.profileDir != "" {
		// -profiles reads them from /debug/pprof, which is off by default.
		args = append(args, "--debug-pprof")
	}
	return args, nil
}

var agents = []agent{
	{name: "split", registersNode: true, start: startSplit},
	{name: "allinone", registersNode: true, start: startAllInOne},
	{name: "kwok", start: startKwok(kwokVersion, 0)},
	// kwok with as many pods played in parallel as Splitlet has status
	// writers (its default is 4, which queues a burst).
	{name: "kwok-par32", start: startKwok(kwokVersion, splitletStatusWriters)},
	{name: "kwok-" + kwokOldVersion, start: startKwok(kwokOldVersion, 0)},
	{name: "ideal", start: startIdeal},
	// The split agent with tracing on, every pod's spans sent to a
	// collector in the bench process that only counts them: the cost of
	// tracing at a sample rate of 1 % and 100 % (-agents split,split-trace1,split-trace100).
	{name: "split-trace1", registersNode: true, start: startSplitTraced(0.01)},
	{name: "split-trace100", registersNode: true, start: startSplitTraced(1)},
	// The split agent with a shadow prober beside its live stages (--shadow:
	// the same pods probed again, results under the shadow prefix): what a
	// shadow costs the node.
	{name: "split-shadow", registersNode: true, start: startSplitShadow},
	// The split and all-in-one agents from another build's binaries
	// (-base-bin): a change and what it replaced, measured in one run
	// (-agents split,split-base,kwok).
	{name: "split-base", registersNode: true, start: fromBaseBin("split-base",
		func(env *benchEnv, binDir, node, name string) (*agentRun, error) {
			return startSplitFrom(env, binDir, node, name)
		})},
	{name: "allinone-base", registersNode: true, start: fromBaseBin("allinone-base", startAllInOneFrom)},
}

// fromBaseBin runs an agent, named name, from the binaries of -base-bin.
func fromBaseBin(name string, start func(env *benchEnv, binDir, node, name string) (*agentRun, error)) func(context.Context, *benchEnv, string) (*agentRun, error) {
	return func(_ context.Context, env *benchEnv, node string) (*agentRun, error) {
		if env.baseBinDir == "" {
			return nil, fmt.Errorf("%s needs -base-bin: a directory with another build's splitlet and stage binaries", name)
		}
		return start(env, env.baseBinDir, node, name)
	}
}

// startSplitTraced is startSplit with tracing-endpoint set on every stage.
func startSplitTraced(rate float64) func(context.Context, *benchEnv, string) (*agentRun, error) {
	return func(ctx context.Context, env *benchEnv, node string) (*agentRun, error) {
		col, err := tracingtest.Start(true)
		if err != nil {
			return nil, err
		}
		r, err := startSplitFrom(env, env.binDir, node, fmt.Sprintf("split-trace%g", rate*100),
			"--tracing-endpoint="+col.URL, fmt.Sprintf("--tracing-sample-rate=%g", rate))
		if r != nil {
			r.cleanups = append(r.cleanups, col.Stop)
		} else {
			col.Stop()
		}
		return r, err
	}
}

// startSplitShadow is the split agent and a shadow prober, its process
// named shadow-prober-0.
func startSplitShadow(_ context.Context, env *benchEnv, node string) (*agentRun, error) {
	r, err := startSplitFrom(env, env.binDir, node, "split-shadow")
	if err != nil {
		return r, err
	}
	const name = shadowProc + "prober-0"
	args, err := r.splitletArgs(env, node, filepath.Join(r.dir, name), name)
	if err != nil {
		return r, err
	}
	args = append(args, "--nats-url="+r.natsURL, "--shadow")
	return r, r.spawn(env, name, filepath.Join(env.binDir, "prober"), args...)
}

// shadowProc starts the name of a shadow stage's process.
const shadowProc = "shadow-"

func startAllInOne(_ context.Context, env *benchEnv, node string) (*agentRun, error) {
	return startAllInOneFrom(env, env.binDir, node, "allinone")
}

// startAllInOneFrom runs the all-in-one agent, splitlet from binDir.
func startAllInOneFrom(env *benchEnv, binDir, node, name string) (*agentRun, error) {
	r, err := newRun(env, name)
	if err != nil {
		return nil, err
	}
	args, err := r.splitletArgs(env, node, filepath.Join(r.dir, "data"), "splitlet")
	if err != nil {
		return nil, err
	}
	_, kport, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args = append(args, "--services=all", fmt.Sprintf("--nodehb.port=%d", kport), "--nodehb.client-ca-file="+env.caFile)
	return r, r.spawn(env, "splitlet", filepath.Join(binDir, "splitlet"), args...)
}

// startSplit runs a real nats-server and the five services as separate
// processes (podworkers env.scale.replicas times).
func startSplit(_ context.Context, env *benchEnv, node string) (*agentRun, error) {
	return startSplitFrom(env, env.binDir, node, "split")
}

// startSplitFrom runs the split agent, its stages from binDir, with extra
// keys for every stage.
func startSplitFrom(env *benchEnv, binDir, node, name string, extra ...string) (*agentRun, error) {
	r, err := newRun(env, name)
	if err != nil {
		return nil, err
	}
	_, natsPort, err := freeAddr()
	if err != nil {
		return nil, err
	}
	monAddr, monPort, err := freeAddr()
	if err != nil {
		return nil, err
	}
	natsArgs := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(natsPort), "-m", strconv.Itoa(monPort), "-js", "-sd", filepath.Join(r.dir, "nats")}
	if env.profileDir != "" {
		profAddr, profPort, err := freeAddr()
		if err != nil {
			return nil, err
		}
		natsArgs = append(natsArgs, "--profile", strconv.Itoa(profPort))
		r.health["nats-server"] = profAddr
	}
	if err := r.spawn(env, "nats-server", filepath.Join(env.binDir, "nats-server"), natsArgs...); err != nil {
		return nil, err
	}
	r.natsMonitor = monAddr
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	r.natsURL = natsURL
	replicas := max(env.scale.replicas, 1)
	services := []string{"podconfig", "statussync", "prober", "nodehb"}
	for i := 0; i < replicas; i++ {
		services = append(services, "podworkers")
	}
	for i, svc := range services {
		args, err := r.splitletArgs(env, node, filepath.Join(r.dir, fmt.Sprintf("%s-%d", svc, i)), fmt.Sprintf("%s-%d", svc, i))
		if err != nil {
			return nil, err
		}
		args = append(args, "--nats-url="+natsURL)
		args = append(args, extra...)
		switch svc {
		case "nodehb":
			_, kport, err := freeAddr()
			if err != nil {
				return nil, err
			}
			args = append(args, fmt.Sprintf("--nodehb.port=%d", kport), "--nodehb.client-ca-file="+env.caFile)
		case "podworkers":
			args = append(args, env.scale.podworkerArgs()...)
		}
		// every stage from the one splitlet binary, as the compose stack
		// runs them: their pages of it are shared, as on a node.
		args = append(args, "--services="+svc)
		if err := r.spawn(env, fmt.Sprintf("%s-%d", svc, i), filepath.Join(binDir, "splitlet"), args...); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (s scaleOptions) podworkerArgs() []string {
	var out []string
	if s.startLatency > 0 {
		out = append(out, "--podworkers.sim-start-latency="+s.startLatency.String())
	}
	if s.maxConcurrent > 0 {
		out = append(out, fmt.Sprintf("--podworkers.sim-max-concurrent-starts=%d", s.maxConcurrent))
	}
	return out
}

// The kwok versions of the bench (Makefile bench-tools installs them as
// bin/kwok and bin/kwok-<old version>).
const (
	kwokVersion    = "v0.8.0"
	kwokOldVersion = "v0.7.0"
)

// splitletStatusWriters is statussync.workers' default.
const splitletStatusWriters = 32

// startKwok runs kwok of the version, with podPlayStageParallelism set
// when parallelism is not 0. v0.8.0 ships no default stages (it
// exits with "no stages found"): it gets the "fast" stages of its own
// module (kustomize/stage/fast: node/fast, node/heartbeat-with-lease,
// pod/fast) through --config, which is what v0.7.0 runs by default.
func startKwok(version string, parallelism uint) func(context.Context, *benchEnv, string) (*agentRun, error) {
	return func(_ context.Context, env *benchEnv, node string) (*agentRun, error) {
		name, bin := "kwok", filepath.Join(env.binDir, "kwok")
		if version != kwokVersion {
			name = "kwok-" + version
			bin += "-" + version
		}
		if parallelism > 0 {
			name += fmt.Sprintf("-par%d", parallelism)
		}
		r, err := newRun(env, name)
		if err != nil {
			return nil, err
		}
		addr, _, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := []string{
			"--kubeconfig=" + env.kubeconfig,
			"--manage-single-node=" + node,
			"--node-ip=127.0.0.1",
			"--cidr=10.200.0.0/16",
			"--server-address=" + addr,
		}
		if version == kwokVersion {
			stages, err := kwokFastStages(version, r.dir)
			if err != nil {
				return nil, err
			}
			args = append(args, "--config="+stages)
		}
		if parallelism > 0 {
			cfg := filepath.Join(r.dir, "kwok-parallelism.yaml")
			// a KwokConfiguration given on the command line gets none of
			// kwok's defaults: the other parallelisms are its defaults.
			doc := fmt.Sprintf("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n"+
				"  podPlayStageParallelism: %d\n  nodePlayStageParallelism: 4\n  nodeLeaseParallelism: 4\n  podsOnNodeSyncParallelism: 1\n", parallelism)
			if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
				return nil, err
			}
			args = append(args, "--config="+cfg)
		}
		return r, r.spawn(env, name, bin, args...)
	}
}

// kwokFastStages writes the stages of kwok's "fast" kustomization, read
// from its module (downloaded through the Go module proxy), into one
// multi-document file in dir.
func kwokFastStages(version, dir string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/kwok@"+version)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kwok %s module: %w", version, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("kwok %s module: no directory in %q", version, out)
	}
	var docs []string
	for _, sub := range []string{"node/fast", "node/heartbeat-with-lease", "pod/fast"} {
		files, err := filepath.Glob(filepath.Join(mod.Dir, "kustomize", "stage", sub, "*.yaml"))
		if err != nil {
			return "", err
		}
		for _, f := range files {
			if filepath.Base(f) == "kustomization.yaml" {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				return "", err
			}
			docs = append(docs, strings.TrimSpace(string(data)))
		}
	}
	if len(docs) == 0 {
		return "", fmt.Errorf("kwok %s module: no stages under kustomize/stage", version)
	}
	path := filepath.Join(dir, "kwok-fast-stages.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o644)
}

func startIdeal(_ context.Context, env *benchEnv, node string) (*agentRun, error) {
	r, err := newRun(env, "ideal")
	if err != nil {
		return nil, err
	}
	return r, r.spawn(env, "ideal", env.self, "--ideal-agent", "--node="+node, "--kubeconfig="+env.kubeconfig)
}
